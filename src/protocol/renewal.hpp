// The renewal rule of an exclusive lease, one place for both fronts (the
// blocking watchdog, lock/watchdog.cpp, and AsyncLock's renewal loop,
// async/async_lease.cpp): when to renew, what a renewal's answer means, how
// long a failing renewal is retried, and which loss ends it. No I/O: the
// fronts send the renew script and declare the loss themselves (the
// watchdog only once a round released its entries' mutexes).
//
// Invariant: a failing renewal is retried only while a retry could still be
// answered before the lease's provable end; then the loss is declared
// (lost() turns true by the clock at that end in any case).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "client/hiredis_handles.hpp"
#include "lockon/lock.hpp"
#include "protocol/lease.hpp"

namespace lockon::detail {

/// What a renewal found.
enum class RenewResult {
  renewed,
  not_owned,    // the key is gone or another owner's: lost (taken)
  io_error,     // no answer, or a refusal: try again soon, unless the lease could have lapsed
  unreachable,  // lost: could not be renewed before the lease ended (no majority)
};

/// Renewals come every third of the lease: two may fail before it ends.
inline std::chrono::milliseconds renew_period(std::chrono::milliseconds ttl) noexcept {
  return std::max(ttl / 3, std::chrono::milliseconds(1));
}

/// After a failed renewal, try again soon rather than a period later: the
/// lease is running out. A tenth of a short lease, so it still gets retries.
inline std::chrono::milliseconds renew_retry(std::chrono::milliseconds ttl) noexcept {
  return std::clamp(ttl / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(50));
}

/// Whether a renewal's error reply (its code: first word) is a slot
/// migration refusing it for its records. While a slot migrates, a script runs only where every key it
/// declares exists (else TRYAGAIN, or ASK where none does), and the
/// renewal declares the lease's records too ({K}:who, and {K}:hs, which
/// exists only after a hand-over or with a waiter of ours behind us): a
/// lease taken without a hand-over was not renewed from MIGRATING to the
/// slot's hand-over, and lapsed (verify --topology cluster, seed 41). Such a
/// renewal is sent again for the lease alone (KEYS: K, which a migrating
/// slot serves wherever K is, an ASK followed); the next full renewal keeps
/// the records.
inline bool refused_by_migration(std::string_view code) noexcept {
  return code == "TRYAGAIN" || code == "ASK";
}

/// How long the Asio front's full renewal on a Cluster may wait out a
/// migration's TRYAGAIN (its router retries it) before the lease alone is
/// renewed: leaves at least half a lease for that.
inline std::chrono::milliseconds migration_fallback_after(std::chrono::milliseconds ttl) noexcept {
  return std::max(ttl / 6, std::chrono::milliseconds(1));
}

/// The renew script's answer: 1 renewed, 0 the key is not ours.
inline RenewResult read_renew_reply(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_INTEGER && reply.integer == 1 ? RenewResult::renewed : RenewResult::not_owned;
}

/// What a renewal's result makes of the lease.
struct RenewalVerdict {
  bool lost = false;                     // declare (reason, detail) and renew no more
  std::chrono::steady_clock::time_point next_due;  // otherwise: renew again then
  std::chrono::steady_clock::time_point lease_end;  // the provable end from now on
  LossReason reason = LossReason::unreachable;
  const char* detail = "";
};

/// Settles `signal` after a renewal sent at `sent_at` with `ticket`
/// (signal.renewal_ticket() then) came to `result`; `lease_end` is the
/// provable end known now (read after the renewal's answer: an extension
/// may have moved it meanwhile). Moves the signal's end on success, counts a
/// failure; the caller declares the loss it returns.
inline RenewalVerdict settle_renewal(LeaseSignal& signal, RenewResult result,
                                     std::chrono::steady_clock::time_point sent_at, std::uint64_t ticket,
                                     std::chrono::milliseconds ttl, std::chrono::steady_clock::time_point lease_end,
                                     std::chrono::steady_clock::time_point now) noexcept {
  RenewalVerdict verdict;
  verdict.lease_end = lease_end;
  switch (result) {
    case RenewResult::renewed:
      verdict.lease_end = add_saturating(sent_at, ttl);
      signal.renewed(ticket, verdict.lease_end);
      verdict.next_due = add_saturating(now, renew_period(ttl));
      return verdict;
    case RenewResult::not_owned:
      verdict.lost = true;
      verdict.reason = LossReason::taken;
      verdict.detail = "renewal found the key gone or held by another owner";
      return verdict;
    case RenewResult::unreachable:
      signal.note_renewal_failure();
      verdict.lost = true;
      verdict.detail = "renewal could not reach a majority before the lease ended";
      return verdict;
    case RenewResult::io_error:
      signal.note_renewal_failure();
      if (now + renew_retry(ttl) >= lease_end) {
        verdict.lost = true;
        verdict.detail = "renewals failed until the lease could have lapsed";
      } else {
        verdict.next_due = now + renew_retry(ttl);
      }
      return verdict;
  }
  return verdict;
}

}  // namespace lockon::detail
