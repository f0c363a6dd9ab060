// Redis Cluster's ASK redirection for a pipeline. ASKING lets the next
// command run on a node importing the slot — one command only, except that
// ASKING right before MULTI lasts the whole transaction (Redis keeps the
// flag while the client is in MULTI; commands queued there must not get
// their own ASKING, which would be queued and answered inside EXEC). A
// redirected pipeline of plain commands (a lock's SET and its holder
// record) therefore needs ASKING before each command outside a transaction:
// with one ASKING in front, the second command is answered MOVED after the
// first one ran. Both fronts ask this class which commands need it.
#pragma once

#include <cctype>
#include <span>
#include <string_view>

namespace lockon::detail {

/// Whether a command's name is `upper` (given in upper case), in any case.
inline bool command_is(std::string_view name, std::string_view upper) noexcept {
  if (name.size() != upper.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(name[i])) != upper[i]) return false;
  return true;
}

class AskingPrefixer {
 public:
  /// Whether `command` (the next one sent to the ASK target) needs ASKING
  /// in front of it; follows MULTI / EXEC / DISCARD.
  bool needs_asking(std::span<const std::string_view> command) noexcept {
    const bool outside = !in_multi_;
    if (!command.empty()) {
      if (command_is(command[0], "MULTI")) in_multi_ = true;
      else if (command_is(command[0], "EXEC") || command_is(command[0], "DISCARD")) in_multi_ = false;
    }
    return outside;
  }

 private:
  bool in_multi_ = false;
};

}  // namespace lockon::detail
