// The process-wide default locker behind decorate()'s call operator and
// default_locker() (lockon/locker.hpp): set explicitly, or made once from
// LOCKON_REDIS_URL.
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/errors.hpp"
#include "lockon/locker.hpp"

namespace lockon {

namespace {

struct DefaultLocker {
  std::mutex mutex;
  std::optional<RedisLocker> locker;
};

DefaultLocker& default_slot() {
  static DefaultLocker slot;
  return slot;
}

}  // namespace

void set_default_locker(RedisLocker locker) {
  DefaultLocker& slot = default_slot();
  const std::lock_guard guard(slot.mutex);
  slot.locker = std::move(locker);
}

void reset_default_locker() noexcept {
  DefaultLocker& slot = default_slot();
  std::optional<RedisLocker> old;
  const std::lock_guard guard(slot.mutex);
  old.swap(slot.locker);  // destroyed after the mutex is released
}

RedisLocker default_locker() {
  DefaultLocker& slot = default_slot();
  const std::lock_guard guard(slot.mutex);
  if (!slot.locker) {
    const char* url = std::getenv("LOCKON_REDIS_URL");
    if (url == nullptr || *url == '\0') {
      throw ConfigError("lockon: no default locker: call lockon::set_default_locker(...) or set LOCKON_REDIS_URL, "
                        "or call the decorated function through .with(locker)");
    }
    // One meaning everywhere (the CLI reads it the same way): several URLs
    // separated by whitespace mean Redlock over those masters.
    std::vector<std::string> urls;
    std::istringstream words{std::string(url)};
    for (std::string word; words >> word;) urls.push_back(word);
    if (urls.size() == 1) slot.locker.emplace(std::string_view(urls.front()));
    else if (urls.size() > 1) slot.locker.emplace(RedisLocker::redlock(urls));
    else throw ConfigError("lockon: LOCKON_REDIS_URL is blank: set it to a URL, or several separated by spaces");
  }
  return *slot.locker;
}

}  // namespace lockon
