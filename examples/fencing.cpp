// examples/fencing.cpp — a resource that rejects stale writers.
//
// A lease can end while its holder still runs (a long GC pause, a frozen VM,
// no renewal): another client then takes the lock and both believe they own
// it. Fencing makes that harmless: each acquisition gets a fence strictly
// greater than every earlier one (LockContext::fence()), and the resource
// refuses writes carrying a fence below the highest it has seen.
//
// Here client A takes the lock, then stalls past its lease (renewal is off to
// make the stall possible); client B takes the lock and writes; A wakes and
// writes with its old fence — the store rejects it, and A's lock_on call
// reports LockLost.
//
//   LOCKON_REDIS_URL=redis://127.0.0.1:6379 ./fencing
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include <lockon/lockon.hpp>

using namespace std::chrono_literals;

// The protected resource. It knows nothing about Redis; it only compares
// fences. (A real one would be a database row with a fence column, a file
// service, ...)
class FencedStore {
 public:
  bool write(const std::string& value, std::uint64_t fence) {
    const std::lock_guard guard(mutex_);
    if (fence <= highest_fence_) {
      std::cout << "  store: REJECTED \"" << value << "\" (fence " << fence << " <= " << highest_fence_ << ")\n";
      return false;
    }
    highest_fence_ = fence;
    value_ = value;
    std::cout << "  store: accepted \"" << value << "\" with fence " << fence << '\n';
    return true;
  }
  std::string value() const {
    const std::lock_guard guard(mutex_);
    return value_;
  }

 private:
  mutable std::mutex mutex_;
  std::uint64_t highest_fence_ = 0;
  std::string value_;
};

int main() {
  const char* env = std::getenv("LOCKON_REDIS_URL");
  const std::string url = env != nullptr && *env != '\0' ? env : "redis://127.0.0.1:6379";
  try {
    FencedStore store;
    // Short lease, no renewal: so that a stalled holder really loses it.
    const lockon::RedisLocker locker(url, {.max_retry = 0, .retry_delay = 1s, .timeout = 5s, .ttl = 200ms,
                                           .auto_renew = false, .fencing = true});
    const auto save = locker.lock_on<0>("example::save", [&](lockon::LockContext& lock, const std::string& document,
                                                             const std::string& value, std::chrono::milliseconds stall) {
      std::cout << document << ": holding with fence " << lock.fence() << '\n';
      std::this_thread::sleep_for(stall);  // a GC pause, a frozen VM...
      return store.write(value, lock.fence());
    });

    std::thread client_a([&] {
      try {
        save("doc", "written by A", 500ms);  // stalls past its 200 ms lease
      } catch (const lockon::LockLost& e) {
        std::cout << "client A: " << e.what() << '\n';
      }
    });
    std::this_thread::sleep_for(50ms);
    std::thread client_b([&] { save("doc", "written by B", 0ms); });  // gets the lock once A's lease ends
    client_a.join();
    client_b.join();
    std::cout << "final value: \"" << store.value() << "\"\n";
  } catch (const lockon::Error& e) {
    std::cerr << "fencing: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
