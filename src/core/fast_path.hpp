// The fast path of an exclusive lock, written once: one write that takes K
// when it is free (SET K token NX [PX ttl] GET, or the fenced script), with
// the holder record's SET NX and WAIT riding in the same write. A coroutine
// template over a port: the blocking Lock's (InlineTask, every step a plain
// blocking call) and AsyncLock's (asio::awaitable). What a reply means, what
// becomes of K and of the record after each failure, is decided here; how a
// write is sent and how K is handed to the background clean-up is the port's.
//
// The port (P):
//   template <class T> using Task         P::Task<void>, P::Task<Sent>, ...
//   Task<Sent> send(commands, until)      one write on K's connection; a
//                                         reply per command when replied,
//                                         error replies among them (not thrown)
//   void abandon(bool outcome_unknown)    the clean-up releases K if it holds
//                                         our token (as a release would)
//   Task<void> drop_record()              deletes the who key if it holds
//                                         this attempt's record (noexcept)
//   Task<void> replace_stale_record(until)  K is ours, the who key named an
//                                         earlier holder: ours replaces it
//   bool sharded(); const std::string& endpoint(); [[noreturn]] throw_token_in_use()
//
// Invariants: once the SET has won (Attempt::granted), any failure after it
// (WAIT refused, a malformed reply) hands K to the clean-up: K never stays
// held by a token nobody holds. A request whose outcome is unknown (reply
// lost, deadline) is handed on as unknown, so the clean-up sweeps it again.
// A record is never left behind by an attempt that took nothing.
#pragma once

#include <array>
#include <chrono>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/error_map.hpp"
#include "client/hiredis_handles.hpp"
#include "client/routed.hpp"
#include "client/script.hpp"
#include "core/attempt.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "protocol/acquire_reply.hpp"

namespace lockon::detail::core {

/// What a fast attempt sends: views that must outlive the attempt.
struct FastRequest {
  std::string_view name;       // K, the lock's name
  std::string_view fence_key;  // the fence counter (fencing only)
  std::string_view who_key;    // the holder record's key (record only)
  std::string_view token;
  std::string_view record;     // empty: no holder record
  std::string_view ttl_text;   // the lease in ms ("0" with no expiry)
  std::span<const std::string_view> wait;  // WAIT n timeout in the same write (empty: none)
  bool fencing = false;
  bool no_expiry = false;
  bool random_token = true;
};

/// A write's outcome on the port.
struct Sent {
  enum class Ended { replied, deadline, cancelled };
  Ended ended = Ended::replied;
  std::vector<ReplyPtr> replies;  // one per command when replied
};

namespace fast_path {

/// What one write of the fast path came to.
enum class Outcome { won, busy, no_answer, token_in_use, set_refused };

// A migrating slot refused the SET (or the fenced script: ASK, TRYAGAIN)
// while the record's SET ran: the write is not resent (routed.hpp), so this
// SET never ran. Only a cluster redirects: elsewhere TRYAGAIN is an error
// reply, thrown as one.
inline bool set_refused(bool sharded, const FastRequest& request, const std::vector<ReplyPtr>& replies) noexcept {
  if (!sharded || request.record.empty() || replies.size() < 2) return false;
  return first_redirect(replies[0]) != nullptr && first_redirect(replies[1]) == nullptr;
}

inline bool nothing_sent(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const ConnectError&) {
    return true;
  } catch (...) {
    return false;
  }
}

[[noreturn]] inline void throw_unexpected(const FastRequest& request, std::string_view endpoint) {
  throw ProtocolError("acquire lock '" + std::string(request.name) + "' on " + std::string(endpoint) +
                      ": unexpected script reply");
}

// The record's SET NX wrote our record (it replied OK, not nil or an error).
inline bool record_written(const FastRequest& request, const Sent& sent) noexcept {
  return !request.record.empty() && sent.ended == Sent::Ended::replied && sent.replies.size() > 1 &&
         sent.replies[1]->type == REDIS_REPLY_STATUS;
}

/// One write of the fast path and what its replies mean. `resent`: an
/// earlier write of this attempt may have run (its reply was lost).
template <class Port>
auto write_once(Port& port, const FastRequest& request, bool resent, Attempt& result, Clock::time_point until)
    -> typename Port::template Task<Outcome> {
  const auto& script = scripts::fenced_acquire();
  // With WAIT in the write, the script's body itself: a NOSCRIPT would have
  // WAIT wait for the holder record alone, and the resend wait again.
  const bool body_first = !request.wait.empty();
  std::array<std::string_view, 7> acquire{};
  std::size_t acquire_size = 0;
  if (request.fencing) {
    acquire = {body_first ? "EVAL" : "EVALSHA",
               body_first ? std::string_view(script.body()) : std::string_view(script.sha()), "2", request.name,
               request.fence_key, request.token, request.ttl_text};
    acquire_size = 7;
  } else if (request.no_expiry) {
    acquire = {"SET", request.name, request.token, "NX", "GET"};
    acquire_size = 5;
  } else {
    acquire = {"SET", request.name, request.token, "NX", "PX", request.ttl_text, "GET"};
    acquire_size = 7;
  }
  // The holder record: NX, so an attempt that loses never overwrites the
  // holder's record.
  const std::array<std::string_view, 6> who{"SET", request.who_key, request.record, "NX", "PX", request.ttl_text};
  std::array<std::span<const std::string_view>, 3> all{std::span<const std::string_view>(acquire).first(acquire_size)};
  std::size_t count = 1;
  if (!request.record.empty()) all[count++] = std::span<const std::string_view>(who).first(request.no_expiry ? 4 : 6);
  if (!request.wait.empty()) all[count++] = request.wait;
  const std::span<const std::span<const std::string_view>> commands(all.data(), count);

  Sent sent = co_await port.send(commands, until);
  bool wrote_record = resent || record_written(request, sent);
  const bool noscript = sent.ended == Sent::Ended::replied && request.fencing && is_noscript(*sent.replies[0]);
  if (noscript) {
    // First use on this server (or after a restart or SCRIPT FLUSH): the
    // same write with the body. The record's SET NX, if it ran, was ours
    // and stays.
    acquire[0] = "EVAL";
    acquire[1] = script.body();
    sent = co_await port.send(commands, until);
    wrote_record = wrote_record || record_written(request, sent);
  }
  if (sent.ended != Sent::Ended::replied) {
    // No answer: the request may still win. A deadline hands it to the
    // clean-up; a cancellation leaves that to the caller (it leaves the
    // queue with the same token).
    if (sent.ended == Sent::Ended::cancelled) {
      result.cancelled = true;
    } else {
      result.deadline_passed = true;
      port.abandon(true);
    }
    co_return Outcome::no_answer;
  }
  if (set_refused(port.sharded(), request, sent.replies)) co_return Outcome::set_refused;
  // The acquisition's outcome before any other reply: a failure after a won
  // SET must not leave K held (fast_attempt).
  const redisReply& first = *sent.replies[0];
  check_reply(first, port.endpoint(), "acquire lock");
  std::optional<AcquireReply> read;
  if (request.fencing)
    read = read_fenced_acquire(first, request.token, request.random_token);
  else
    read = read_set_acquire(first, request.token, request.random_token);
  if (!read) throw_unexpected(request, port.endpoint());
  result.granted = read->outcome == AcquireReply::Outcome::won;
  // An error reply to the record (an ACL that denies its key, OOM) fails
  // the acquisition, a won K handed on (fast_attempt): a deployment that
  // cannot keep the records it was asked for is told at once. A record
  // refused by a migrating slot while the SET ran is not resent
  // (routed.hpp): the lock goes without a record.
  if (!request.record.empty() && first_redirect(sent.replies[1]) == nullptr)
    check_reply(*sent.replies[1], port.endpoint(), "record the lock's holder");
  if (!request.wait.empty()) {
    check_reply(*sent.replies.back(), port.endpoint(), "WAIT for replicas");
    result.acks = static_cast<int>(sent.replies.back()->integer);
  }
  if (read->outcome != AcquireReply::Outcome::won) {
    // K is someone else's, but our record's SET NX may have found the who
    // key empty (a holder without a record): ours must not stay there.
    if (wrote_record) co_await port.drop_record();
    co_return read->outcome == AcquireReply::Outcome::busy ? Outcome::busy : Outcome::token_in_use;
  }
  // The record's SET NX found an earlier holder's record (a forced release,
  // an expiry): ours replaces it while K holds our token.
  const bool stale_record = !request.record.empty() && sent.replies[1]->type == REDIS_REPLY_NIL;
  if (stale_record) co_await port.replace_stale_record(until);
  result.fence = read->fence;
  co_return Outcome::won;
}

}  // namespace fast_path

/// The fast path: one write, resent once with the same random token when
/// its reply was lost with the connection (K holding our token then tells
/// that the first write won). `deadline` min(): one try, no deadline.
template <class Port>
auto fast_attempt(Port& port, const FastRequest& request, Clock::time_point deadline)
    -> typename Port::template Task<Attempt> {
  Attempt result;
  result.sent_at = Clock::now();
  const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
  for (int round = 0;; ++round) {
    fast_path::Outcome outcome = fast_path::Outcome::no_answer;
    std::exception_ptr failure;
    try {
      outcome = co_await fast_path::write_once(port, request, round > 0, result, until);
    } catch (const ClosedError&) {
      if (round == 0 && request.random_token) continue;
      failure = std::current_exception();
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      // The SET won but a later step failed (WAIT refused, a malformed
      // reply), or the outcome is unknown (a lost reply, an earlier round
      // whose reply was lost and may have won): the clean-up hands K on or
      // deletes it, as a release would. Else nothing of ours holds K: our
      // record, if written, goes (the SET failed: WRONGTYPE, OOM...) — not
      // when nothing was sent (ConnectError): no record was written, and a
      // delete would only reconnect past the caller's deadline.
      const bool unknown = round > 0 || outcome_unknown(failure);
      if (result.granted || unknown)
        port.abandon(unknown);
      else if (!fast_path::nothing_sent(failure))
        co_await port.drop_record();
      std::rethrow_exception(failure);
    }
    if (outcome == fast_path::Outcome::token_in_use) port.throw_token_in_use();
    if (outcome == fast_path::Outcome::set_refused) {
      // On a resend after a lost reply the first write may have won on the
      // node K moved to: unknown, so the clean-up releases K if ours (the
      // record left to it). Else nothing of ours holds K: the record goes.
      if (round > 0)
        port.abandon(true);
      else
        co_await port.drop_record();
      co_return result;
    }
    result.acquired = outcome == fast_path::Outcome::won;
    co_return result;
  }
}

}  // namespace lockon::detail::core
