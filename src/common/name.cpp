#include "lockon/name.hpp"

#include <string>

#include "lockon/errors.hpp"

namespace lockon {

void validate_name(std::string_view name, std::string_view what) {
  if (name.empty()) throw ConfigError(std::string(what) + ": the name must not be empty");
  if (name.size() <= kMaxNameBytes) return;
  // The name itself may be megabytes: the message shows its start only,
  // printable bytes as they are and the others as '?'.
  std::string start(name.substr(0, 40));
  for (char& c : start)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  throw ConfigError(std::string(what) + " '" + start + "...': the name is " + std::to_string(name.size()) +
                    " bytes long; lockon accepts names of at most " + std::to_string(kMaxNameBytes) +
                    " bytes (lockon/name.hpp)");
}

}  // namespace lockon
