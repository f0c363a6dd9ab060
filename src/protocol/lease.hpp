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

#include "common/fork.hpp"
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

  using Clock = std::chrono::steady_clock;

  /// True once declared lost, or once the lease end known locally has
  /// passed while the lease is still in use (a holder resumed after a pause
  /// longer than its lease must not believe it still holds it).
  bool lost() const noexcept {
    if (lost_.load(std::memory_order_acquire)) return true;
    if (parts_lost_ && parts_lost_()) return true;
    const auto end = lease_end_ns_.load(std::memory_order_acquire);
    return end != kOpen && Clock::now().time_since_epoch().count() >= end;
  }
  /// The stop state is made on first request (most acquisitions never ask,
  /// and making it is an allocation per acquisition); a token asked for
  /// after the loss is already stopped. Out of memory: a token that can
  /// never stop (stop_possible() false).
  std::stop_token token() const noexcept {
    const std::lock_guard guard(stop_mutex_);
    if (!stop_.stop_possible()) {
      try {
        stop_ = std::stop_source();
      } catch (...) {
        return std::stop_token();
      }
      // No token of this source exists yet: no stop callback runs here.
      if (lost_.load(std::memory_order_acquire)) stop_.request_stop();
    }
    return stop_.get_token();
  }

  /// The lease's end as this process can prove it: the send time of the
  /// acquisition (or of the last confirmed renewal) plus the ttl. Called at
  /// acquisition and by every successful renewal or extension.
  void set_lease_end(Clock::time_point end) noexcept {
    lease_end_ns_.store(end == Clock::time_point::max() ? kOpen : end.time_since_epoch().count(),
                        std::memory_order_release);
  }
  /// An extension that replaces the ttl may shorten the lease, and a
  /// renewal (PEXPIRE GT) in flight at the same time must not move the
  /// local end past it: their order on the server is not their order here
  /// (found by review, session 17: lost() stayed false after the key
  /// expired). Around such an extension: begin_shortening() before sending,
  /// end_shortening() after its reply (also when it failed).
  void begin_shortening() noexcept {
    shortening_.fetch_add(1, std::memory_order_acq_rel);
    shorten_epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  void end_shortening() noexcept {
    shorten_epoch_.fetch_add(1, std::memory_order_acq_rel);
    shortening_.fetch_sub(1, std::memory_order_acq_rel);
  }
  /// begin_shortening() now and end_shortening() at scope exit when
  /// `replace_ttl` (an extension that replaces the ttl); nothing otherwise.
  class Shortening {
   public:
    Shortening(LeaseSignal& signal, bool replace_ttl) noexcept : signal_(replace_ttl ? &signal : nullptr) {
      if (signal_ != nullptr) signal_->begin_shortening();
    }
    ~Shortening() {
      if (signal_ != nullptr) signal_->end_shortening();
    }
    Shortening(const Shortening&) = delete;
    Shortening& operator=(const Shortening&) = delete;

   private:
    LeaseSignal* signal_;
  };
  /// Taken when a renewal is sent, given back to renewed(): 0 when a
  /// shortening extension is in flight (the renewal then never sets the end).
  std::uint64_t renewal_ticket() const noexcept {
    // The epoch first: an extension starting after it changes the epoch.
    const std::uint64_t epoch = shorten_epoch_.load(std::memory_order_acquire);
    if (shortening_.load(std::memory_order_acquire) != 0) return 0;
    return epoch + 1;
  }
  /// A renewal sent with `ticket` succeeded: the end moves to `end` unless a
  /// shortening extension overlapped it (then the extension's end stands).
  void renewed(std::uint64_t ticket, Clock::time_point end) noexcept {
    if (ticket == 0 || shorten_epoch_.load(std::memory_order_acquire) + 1 != ticket) return;
    set_lease_end(end);
  }
  Clock::time_point lease_end() const noexcept {
    const auto end = lease_end_ns_.load(std::memory_order_acquire);
    return end == kOpen ? Clock::time_point::max() : Clock::time_point(Clock::duration(end));
  }
  /// The lease ended by a successful release (or never expires): lost()
  /// no longer turns true by the clock.
  void close() noexcept { lease_end_ns_.store(kOpen, std::memory_order_release); }

  /// A lease made of other leases (a MultiLock's keys'): lost() is also
  /// true while `parts_lost` says one of them is (by the clock included).
  /// Set before the lease is shared; `parts_lost` must be noexcept.
  void set_parts_lost(std::function<bool()> parts_lost) { parts_lost_ = std::move(parts_lost); }

  /// Marks the lease lost; the first call requests stop and runs the
  /// callback (exceptions from it are swallowed: we are on lockon's thread).
  void declare_lost(LossReason reason, std::string detail) noexcept;

  /// Renewals of this lease that failed (no answer, no majority): metrics.
  void note_renewal_failure() noexcept { renewal_failures_.fetch_add(1, std::memory_order_relaxed); }
  std::uint32_t renewal_failures() const noexcept { return renewal_failures_.load(std::memory_order_relaxed); }

 private:
  std::string name_;
  std::function<void(const LossEvent&)> on_lost_;
  static constexpr std::int64_t kOpen = INT64_MAX;
  std::function<bool()> parts_lost_;
  std::atomic<bool> lost_{false};
  std::atomic<std::int64_t> lease_end_ns_{kOpen};
  std::atomic<std::uint32_t> renewal_failures_{0};
  std::atomic<std::uint32_t> shortening_{0};     // replace-ttl extensions in flight
  std::atomic<std::uint64_t> shorten_epoch_{0};  // +1 at each one's start and end
  // Guards the lazy creation of stop_ against declare_lost (any thread).
  mutable std::mutex stop_mutex_;
  mutable std::stop_source stop_{std::nostopstate};
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
  bool handed_over = false;  // the current acquisition came by a release's hand-over
  std::exception_ptr last_unlock_error;
  std::shared_ptr<detail::LeaseSignal> lease;  // replaced at each acquisition
  /// fork_generation() of the acquisition: in a forked child, a lock the
  /// parent holds is not held (the parent holds it, and will release it).
  std::uint64_t generation = 0;

  /// Fresh signal for a new acquisition.
  void begin_lease() {
    lease = std::make_shared<detail::LeaseSignal>(name, options.on_lost);
    generation = detail::fork_generation();
  }
  /// Held by this process image (see `generation`). A parent's holding seen
  /// in a forked child is forgotten here, without any I/O.
  bool held_here() noexcept {
    if (held && generation != detail::fork_generation()) held = false;
    return held;
  }
};

}  // namespace lockon
