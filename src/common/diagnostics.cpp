#include "common/diagnostics.hpp"

#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#include "lockon/diagnostics.hpp"

namespace lockon {
namespace {

struct Registry {
  std::mutex mutex;
  std::set<std::string, std::less<>> seen;
  bool custom = false;
  WarningHandler handler;
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: usable from exit-time threads
  return *r;
}

}  // namespace

void set_warning_handler(WarningHandler handler) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.custom = true;
  r.handler = std::move(handler);
}

namespace detail {

void warn_once(std::string_view topic, std::string_view message) noexcept {
  Registry& r = registry();
  WarningHandler handler;
  bool use_default = false;
  try {
    std::lock_guard lock(r.mutex);
    if (!r.seen.emplace(topic).second) return;
    use_default = !r.custom;
    if (r.custom) handler = r.handler;
  } catch (...) {
    return;
  }
  // Called outside the mutex: a handler that logs slowly blocks nobody else.
  if (use_default) {
    std::fprintf(stderr, "lockon: warning: %.*s\n", static_cast<int>(message.size()), message.data());
    return;
  }
  if (!handler) return;
  try {
    handler(topic, message);
  } catch (...) {
  }
}

bool warned(std::string_view topic) noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.seen.find(topic) != r.seen.end();
}

}  // namespace detail
}  // namespace lockon
