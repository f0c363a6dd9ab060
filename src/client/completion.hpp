// A one-shot completion flag on a private futex, for the automatic
// pipeline's callers (pipeline.cpp). Internal.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace lockon::detail {

// A one-shot completion flag a single waiter sleeps on (a private futex).
// The waker needs no lock and makes the wake-up syscall only if the waiter
// announced it is asleep; a condition variable would need the waiter's
// mutex around the flag.
class Completion {
 public:
  /// Marks it done and wakes the waiter. The waiter may return (and free
  /// this object) as soon as the store is visible: nothing here is touched
  /// after it but the futex word's address, which FUTEX_WAKE only hashes (a
  /// stray wake of whatever lives there next is a spurious wake-up, which
  /// every futex waiter tolerates).
  void set() noexcept {
    if (mark_done()) wake(word());
  }
  /// set() in two steps: marks it done and returns whether the waiter must
  /// be woken (it is asleep), with wake(word()) — which may come later.
  bool mark_done() noexcept { return state_.exchange(kDone, std::memory_order_acq_rel) == kSleeping; }
  std::uint32_t* word() noexcept { return reinterpret_cast<std::uint32_t*>(&state_); }
  static void wake(std::uint32_t* word) noexcept {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

  /// Waits until set or `deadline` (steady clock = CLOCK_MONOTONIC);
  /// returns whether it was set.
  bool wait_until(std::chrono::steady_clock::time_point deadline) noexcept {
    std::uint32_t state = state_.load(std::memory_order_acquire);
    while (state != kDone) {
      if (state == kPending &&
          !state_.compare_exchange_weak(state, kSleeping, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;  // `state` was reloaded (maybe done)
      }
      timespec at{};
      const timespec* timeout = nullptr;
      if (deadline != std::chrono::steady_clock::time_point::max()) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
        if (deadline <= std::chrono::steady_clock::now()) return false;
        at.tv_sec = static_cast<time_t>(ns / 1000000000);
        at.tv_nsec = static_cast<long>(ns % 1000000000);
        timeout = &at;
      }
      // Absolute CLOCK_MONOTONIC deadline (FUTEX_WAIT_BITSET); returns on a
      // wake, a timeout, EINTR, or EAGAIN if the word changed first.
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&state_), FUTEX_WAIT_BITSET_PRIVATE, kSleeping, timeout,
              nullptr, FUTEX_BITSET_MATCH_ANY);
      state = state_.load(std::memory_order_acquire);
    }
    return true;
  }

 private:
  static constexpr std::uint32_t kPending = 0;
  static constexpr std::uint32_t kSleeping = 1;  // pending, and the waiter is (about to be) in FUTEX_WAIT
  static constexpr std::uint32_t kDone = 2;
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  std::atomic<std::uint32_t> state_{kPending};
};

}  // namespace lockon::detail
