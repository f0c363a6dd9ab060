// One acquisition attempt's outcome, as every exclusive-lock algorithm of
// the core reports it (the fast path, a queued waiter's attempt, a
// hand-over), on every port.
#pragma once

#include <chrono>
#include <cstdint>

namespace lockon::detail::core {

using Clock = std::chrono::steady_clock;

struct Attempt {
  bool acquired = false;
  bool deadline_passed = false;  // no reply before the caller's deadline
  bool cancelled = false;        // the awaiting coroutine was cancelled mid-request (Asio port)
  std::uint64_t fence = 0;
  long long pttl = -2;
  Clock::time_point sent_at;  // precedes the grant: the lease starts here
  int acks = -1;              // WAIT's reply in the same write (-1: none)
  bool handed = false;        // granted by a release's hand-over message
  long long ahead = -1;       // queued entries before ours (-1: unknown)
  // The fast path's SET granted K to our token, whatever fails after it
  // (WAIT, the fence, a reply check): K must then be handed on, not left
  // held by a token nobody holds for a whole lease (core::fast_attempt).
  bool granted = false;
  // With deadline_passed: the deadline had passed before the send, and
  // nothing went out (core::wait_attempt). Last: fronts build an Attempt
  // positionally.
  bool unsent = false;
};

}  // namespace lockon::detail::core
