// unit/lock_on_fake_backend.hpp — an in-process DistributedLock backend for
// server-free tests of lock_on's call machinery (the attempt loop, results,
// exceptions, context injection, lease loss), through RedisLocker's
// LockFactory constructor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "protocol/lease.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"

namespace lockon::test {

/// Shared "server": which keys are held, and counters to assert on.
struct FakeBackend {
  std::mutex mutex;
  std::condition_variable released;
  std::map<std::string, bool> held;
  int acquire_calls = 0;            // one per DistributedLock::acquire_until = one attempt
  std::uint64_t next_fence = 0;
  std::vector<std::string> keys;    // every key a lock was created for

  bool is_held(const std::string& key) {
    const std::lock_guard guard(mutex);
    return held[key];
  }
  void set_held(const std::string& key, bool value) {
    {
      const std::lock_guard guard(mutex);
      held[key] = value;
    }
    released.notify_all();
  }
  int attempts() {
    const std::lock_guard guard(mutex);
    return acquire_calls;
  }
};

class FakeLock final : public DistributedLock {
 public:
  FakeLock(FakeBackend& backend, std::string name, LockOptions options)
      : DistributedLock(std::move(name), std::move(options)), backend_(backend) {}
  ~FakeLock() override { unlock(); }

  /// Declares the current lease lost, as lockon's watchdog would.
  void lose() { state().lease->declare_lost(LossReason::taken, "lost on purpose by the test"); }

  void release() override {
    if (!state().held) throw LockError("not held", name());
    state().held = false;
    backend_.set_held(name(), false);
    if (lost()) throw LockNotOwned("fake: the lease was lost", name());
  }
  void extend(std::chrono::milliseconds, bool) override {}
  void reacquire() override {}
  bool owned() override { return state().held && !lost(); }
  bool locked() override { return backend_.is_held(name()); }
  std::optional<std::chrono::milliseconds> remaining_ttl() override { return options().ttl; }

 protected:
  bool acquire_until(Clock::time_point deadline) override {
    if (state().held) throw LockError("already held", name());
    std::unique_lock guard(backend_.mutex);
    ++backend_.acquire_calls;
    auto free = [&] { return !backend_.held[name()]; };
    if (!free()) {
      if (deadline == Clock::time_point::min()) return false;
      if (!backend_.released.wait_until(guard, deadline, free)) return false;
    }
    backend_.held[name()] = true;
    state().held = true;
    state().fence = options().fencing ? ++backend_.next_fence : 0;
    state().begin_lease();
    return true;
  }

 private:
  FakeBackend& backend_;
};

/// A RedisLocker whose locks live in `backend`.
inline RedisLocker fake_locker(FakeBackend& backend, LockerPolicy policy = {}) {
  return RedisLocker(
      [&backend](std::string key, LockOptions options) -> std::unique_ptr<DistributedLock> {
        {
          const std::lock_guard guard(backend.mutex);
          backend.keys.push_back(key);
        }
        return std::make_unique<FakeLock>(backend, std::move(key), std::move(options));
      },
      std::move(policy));
}

}  // namespace lockon::test
