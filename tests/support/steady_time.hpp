// support/steady_time.hpp — steady-clock arithmetic for test timings, in the
// plain integers assertions and logs compare. Header-only and free of
// GoogleTest, so the unit tests (no server, no support library) use it too.
#pragma once

#include <chrono>

namespace lockon::test {

/// Milliseconds elapsed on the steady clock since `start`.
inline long long ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
}

/// Milliseconds from `from` to `to` (negative if `to` came first).
inline long long ms_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

/// `t` as nanoseconds since the steady clock's epoch: a time point that fits
/// in a std::atomic<long long>.
inline long long ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// ns_of(now).
inline long long now_ns() { return ns_of(std::chrono::steady_clock::now()); }

}  // namespace lockon::test
