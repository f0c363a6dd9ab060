// Per-acquisition lease bookkeeping shared by a lock object and the watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "lockon/lock.hpp"

namespace lockon::detail {

/// `from + delta`, saturating at time_point::max(): steady_clock counts
/// nanoseconds (about ±292 years), less than a 2^47 ms ttl, a max_hold or a
/// poll interval may span, and wrapping into the past makes waits and
/// renewals spin.
inline std::chrono::steady_clock::time_point add_saturating(std::chrono::steady_clock::time_point from,
                                                            std::chrono::milliseconds delta) {
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::time_point::max() - from);
  return delta >= room ? std::chrono::steady_clock::time_point::max() : from + delta;
}

/// The loss signal of one acquisition: a flag, a stop_source and the user
/// callback, fired at most once whoever notices first (watchdog or unlock).
class LeaseSignal {
 public:
  LeaseSignal(std::string name, std::function<void(const LossEvent&)> on_lost)
      : name_(std::move(name)), on_lost_(std::move(on_lost)) {}

  bool lost() const noexcept { return lost_.load(std::memory_order_acquire); }
  std::stop_token token() const noexcept { return stop_.get_token(); }

  /// Marks the lease lost; the first call requests stop and runs the
  /// callback (exceptions from it are swallowed: we are on lockon's thread).
  void declare_lost(LossReason reason, std::string detail) noexcept;

 private:
  std::string name_;
  std::function<void(const LossEvent&)> on_lost_;
  std::atomic<bool> lost_{false};
  std::stop_source stop_;
};

}  // namespace lockon::detail

namespace lockon {

/// State common to every DistributedLock. The owning thread reads and writes
/// the acquisition fields; the watchdog only touches `lease` (thread-safe).
struct DistributedLock::State {
  std::string name;
  LockOptions options;
  bool held = false;
  std::string token;  // the current acquisition's token (never logged)
  std::uint64_t fence = 0;
  std::exception_ptr last_unlock_error;
  std::shared_ptr<detail::LeaseSignal> lease;  // replaced at each acquisition

  /// Fresh signal for a new acquisition.
  void begin_lease() { lease = std::make_shared<detail::LeaseSignal>(name, options.on_lost); }
};

}  // namespace lockon
