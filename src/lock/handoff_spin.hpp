// When a queued waiter expects its hand-over soon, it polls its wake-up
// socket (yielding the CPU between looks) instead of sleeping in the
// kernel. A sleeping waiter pays a scheduler wake-up on the lock's critical
// path: on this 2-vCPU VM (cpuidle haltpoll with guest_halt_poll_ns=0) an
// idle virtual CPU halts at once and the host must run it again, tens of µs
// per wake-up. At four processes on one key that was the largest gap to a
// spinning SET NX loop, which never lets a CPU go idle (docs/benchmarks.md,
// session 10, has the figures with and without this, and its CPU cost).
//
// The window comes from what the queue says: the last attempt reports how
// many waiters were ahead, and the process remembers how often this key
// changes hands (per subscriber channel, Subscriber::Watch). The waiter
// sleeps until `max_spin` (LockOptions::handoff_spin) before one interval
// past the expected hand-over, and polls from then until that point: a
// hand-over later than that means the estimate was wrong, and the waiter
// goes back to sleep. Keys that change hands slower than `max_spin` are
// never polled: a wake-up is then a small part of a turn. Internal.
#pragma once

#include <algorithm>
#include <chrono>

namespace lockon::detail {

struct SpinWindow {
  using Clock = std::chrono::steady_clock;
  Clock::time_point from{};  // poll without sleeping in [from, to)
  Clock::time_point to{};
  bool empty() const noexcept { return to <= from; }
};

/// The window for a waiter whose last attempt, sent at `sent_at`, found
/// `ahead` entries before its own (< 0: unknown), on a key that has been
/// changing hands every `interval` (0: not measured yet): it ends one
/// interval after the expected hand-over (sent_at + (ahead + 1) × interval)
/// and lasts at most `max_spin`. Empty when either is unknown, or
/// `interval` exceeds `max_spin`, or `max_spin` is 0.
inline SpinWindow spin_window(SpinWindow::Clock::time_point sent_at, long long ahead,
                              std::chrono::nanoseconds interval, std::chrono::microseconds max_spin) {
  if (ahead < 0 || interval.count() <= 0 || max_spin.count() <= 0 || interval > max_spin || ahead > 1'000'000)
    return {};
  const auto to = sent_at + interval * (ahead + 2);  // one interval past the expected hand-over
  const auto from = std::max<SpinWindow::Clock::time_point>(sent_at, to - max_spin);
  return {from, to};
}

/// The interval estimate after a hand-over that came `waited` after an
/// attempt which found `ahead` entries before its own: a moving average
/// (weight 1/4 for the new sample), so one stall does not set it.
inline std::chrono::nanoseconds next_handoff_interval(std::chrono::nanoseconds previous,
                                                      std::chrono::nanoseconds waited, long long ahead) {
  if (ahead < 0 || waited.count() <= 0) return previous;
  const auto sample = waited / (ahead + 1);
  return previous.count() <= 0 ? sample : (previous * 3 + sample) / 4;
}

}  // namespace lockon::detail
