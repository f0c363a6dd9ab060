// A queued waiter's attempt (scripts::wait_attempt), written once for both
// fronts: take K if it is free and our entry is at the head of the queue,
// else queue the entry (when asked) and learn K's remaining lease and how
// many wait ahead. A coroutine template over the lock's port (see
// core/fast_path.hpp for the port's other steps); this one needs
//   Task<Sent> run_wait_attempt(std::span<const std::string_view> argv, until)
//   void warn_publish_denied()
//
// Invariant: the attempt is resent at most once, after its reply was lost
// with the connection, and only with a random token; the resend never
// queues blindly: it finds our entry if the lost attempt queued it (LPOS),
// and K holding our token if the lost attempt won.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "client/error_map.hpp"
#include "core/attempt.hpp"
#include "core/fast_path.hpp"
#include "lockon/errors.hpp"
#include "protocol/wait_attempt.hpp"

namespace lockon::detail::core {

/// What a queued waiter's attempt sends: views that must outlive it.
struct WaitRequest {
  std::string_view name;   // K, for errors
  std::string_view entry;  // our queue entry (protocol/queue_entry.hpp)
  std::string_view record;  // the holder record written on a grant (empty: none)
  bool random_token = true;
};

template <class Port>
auto wait_attempt(Port& port, const WaitRequest& request, bool enqueue, Clock::time_point deadline)
    -> typename Port::template Task<Attempt> {
  Attempt result;
  result.sent_at = Clock::now();  // the first send: a grant by a lost attempt cannot precede it
  // Past the deadline nothing is sent: its reply could not be read in time,
  // and on a pooled connection an unread reply breaks it and leaves an
  // attempt that may run after our cancel. The wait for the subscription
  // before a first attempt can end at the deadline (found under load:
  // LockProxyPool.ATimedOutWaitSendsNoAttemptAfterItsDeadline).
  if (result.sent_at >= deadline) {
    result.deadline_passed = true;
    result.unsent = true;
    co_return result;
  }
  Sent sent;
  for (int round = 0;; ++round) {
    const WaitAttemptArgs args(request.entry, enqueue && round == 0, request.random_token, request.record);
    bool resend = false;
    try {
      sent = co_await port.run_wait_attempt(args.view(), deadline);
    } catch (const ClosedError&) {
      // The connection closed under the request: typically a proxy or the
      // server dropped every connection at once, and the subscriber woke us
      // first (HandoffSpinFaults.AllConnectionsClosedWhilePollingStillHandsOver).
      if (round > 0 || !request.random_token) throw;
      resend = true;
    }
    if (!resend) break;
  }
  if (sent.ended != Sent::Ended::replied) {
    result.cancelled = sent.ended == Sent::Ended::cancelled;
    result.deadline_passed = !result.cancelled;
    co_return result;
  }
  const redisReply& reply = *sent.replies.front();
  check_reply(reply, port.endpoint(), "acquire lock");
  const std::optional<WaitAttemptReply> read = read_wait_attempt(reply);
  if (!read)
    throw ProtocolError("acquire lock '" + std::string(request.name) + "' on " + std::string(port.endpoint()) +
                        ": unexpected script reply");
  if (read->publish_denied) port.warn_publish_denied();
  if (read->token_in_use) port.throw_token_in_use();
  result.acquired = read->acquired;
  result.fence = read->fence;
  result.pttl = read->pttl;
  result.ahead = read->ahead;
  co_return result;
}

}  // namespace lockon::detail::core
