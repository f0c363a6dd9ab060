// When a refused request is sent again, and after what pause: the rules
// both fronts follow (the blocking routed_call, the Asio AsyncCluster and
// AsyncClientImpl). Decisions only — no I/O, no sleeping: each front waits
// the pause its own way (a thread sleep, an Asio timer).
//
// Invariants:
//   - nothing is resent unless nothing of it ran (a refusal before
//     execution: MOVED/ASK/TRYAGAIN/CLUSTERDOWN, or READONLY on every reply);
//   - no pause ends at or after the bound (the caller's deadline, or
//     routing_bound's default without one): the caller gives up instead;
//   - a request is sent at most kMaxRoutedWaits times.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <vector>

#include "client/hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

inline constexpr int kMaxRoutedAttempts = 16;  // MOVED/ASK in one request: a redirection loop
inline constexpr int kMaxRoutedWaits = 1000;   // sends of one request, back-offs included

/// What bounds a routed request: the caller's deadline, or without one
/// (time_point::max()) the larger of the socket timeout and one second from
/// `now`.
inline std::chrono::steady_clock::time_point routing_bound(const ConnectionOptions& options,
                                                           std::chrono::steady_clock::time_point until,
                                                           std::chrono::steady_clock::time_point now) {
  if (until != std::chrono::steady_clock::time_point::max()) return until;
  return now + std::max<std::chrono::steady_clock::duration>(options.socket_timeout, std::chrono::seconds(1));
}

/// The pause before resending a request refused for now (a cluster's
/// TRYAGAIN, CLUSTERDOWN, no owner for the slot, connection refused, a MOVED
/// right after a MOVED; a Sentinel master's READONLY): doubling from 1 ms to
/// 100 ms, and never one that would end at or after the bound.
class RetryBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RetryBackoff(Clock::time_point bound) noexcept : bound_(bound) {}
  /// The next pause, or zero when none fits before the bound (give up).
  Clock::duration next() noexcept {
    if (Clock::now() + delay_ >= bound_) return Clock::duration::zero();
    const Clock::duration pause = delay_;
    delay_ = std::min(delay_ * 2, kLongest);
    return pause;
  }

 private:
  static constexpr Clock::duration kLongest = std::chrono::milliseconds(100);
  Clock::time_point bound_;
  Clock::duration delay_ = std::chrono::milliseconds(1);
};

inline bool is_readonly(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_ERROR && std::string_view(reply.str, reply.len).starts_with("READONLY");
}
inline const redisReply* first_readonly(const ReplyPtr& reply) noexcept {
  return reply && is_readonly(*reply) ? reply.get() : nullptr;
}
inline const redisReply* first_readonly(const std::vector<ReplyPtr>& replies) noexcept {
  for (const ReplyPtr& reply : replies)
    if (const redisReply* found = first_readonly(reply)) return found;
  return nullptr;
}

/// Whether nothing of the request ran: every reply is an error reply (a
/// replica refuses each write; what it accepts, a PUBLISH, a read, answers
/// otherwise). Only such a request is sent again after a READONLY: a
/// pipeline whose PUBLISH ran would publish twice.
inline bool nothing_ran(const ReplyPtr& reply) noexcept { return reply && reply->type == REDIS_REPLY_ERROR; }
inline bool nothing_ran(const std::vector<ReplyPtr>& replies) noexcept {
  for (const ReplyPtr& reply : replies)
    if (!nothing_ran(reply)) return false;
  return !replies.empty();
}

/// Sentinel: READONLY means the master the client knows is a replica now (a
/// failover, or sentinels naming a demoted server). Nothing was written (a
/// replica refuses every write), so the request is sent again — to whatever
/// master a new resolution finds — after a RetryBackoff pause, within the
/// bound, when nothing of it ran; a resolution that finds no master after
/// such a refusal is waited out the same way. When no pause fits, the last
/// error stands: a caller that retries on errors never spins against a
/// replica. One server (no Sentinel): no resend, the error stands.
class ReadOnlyRetry {
 public:
  using Clock = std::chrono::steady_clock;
  ReadOnlyRetry(bool sentinel, Clock::time_point bound) noexcept : sentinel_(sentinel), backoff_(bound) {}

  /// The request got a READONLY; `ran`: whether any of its replies was not
  /// an error. The pause before sending it again, or nullopt: the reply
  /// stands.
  std::optional<Clock::duration> after_readonly(bool ran) noexcept {
    refused_ = true;
    return ran ? std::nullopt : pause();
  }
  /// No master was found (nothing sent). The pause before resolving again,
  /// or nullopt: the resolution's error stands (it was not preceded by a
  /// READONLY in this request, or no pause fits).
  std::optional<Clock::duration> after_no_master() noexcept { return refused_ ? pause() : std::nullopt; }

 private:
  std::optional<Clock::duration> pause() noexcept {
    if (!sentinel_ || ++resends_ >= kMaxRoutedWaits) return std::nullopt;
    const Clock::duration delay = backoff_.next();
    if (delay == Clock::duration::zero()) return std::nullopt;
    return delay;
  }

  bool sentinel_;
  bool refused_ = false;
  int resends_ = 0;
  RetryBackoff backoff_;
};

}  // namespace lockon::detail
