// The queue entry: how a waiter (or an attempt's clean-up) names itself to
// the lock scripts, built and parsed here only (both fronts, exclusive and
// shared). The scripts split it on '|':
//
//   "<subscriber id>|<waiter id>|<ttl ms>|<kind>|<token>"
//
//   subscriber id  the process's pub/sub id, whose wake channel a hand-over
//                  publishes on; "-" for an attempt that never queued
//   waiter id      the waiter within that process; "-" likewise
//   ttl ms         the lease a hand-over grants
//   kind           exclusive: "1" fenced, "0" not; shared: the holder kind
//   token          last, so that a custom token may itself hold '|'
//
// Frozen: blocking and async processes of old and new builds queue in one
// list (wire compatibility).
#pragma once

#include <string>
#include <string_view>

namespace lockon::detail {

/// How long a queue outlives its last attempt, in ms (ARGV of every queue
/// script, exclusive and shared): entries outlive any wait; emptied lists
/// vanish by themselves.
inline constexpr std::string_view kQueueTtlMs = "600000";

/// The subscriber and waiter id of an entry that never waited in line (the
/// fast path's attempt, and its clean-up).
inline constexpr std::string_view kNotQueued = "-";

/// The exclusive kind field: "1" fenced, "0" not.
inline constexpr std::string_view exclusive_kind(bool fenced) noexcept { return fenced ? "1" : "0"; }

/// An entry's text from its fields (see above).
std::string queue_entry(std::string_view subscriber_id, std::string_view waiter_id, std::string_view ttl_ms,
                        std::string_view kind, std::string_view token);

/// The token of an entry; empty if it has fewer fields.
std::string entry_token(std::string_view entry);

/// The same waiter's entry under another subscriber id (its other fields,
/// token included, unchanged): a wait that follows a failover to the new
/// master's subscriber (scripts::move_wait).
std::string entry_for_subscriber(std::string_view entry, std::string_view subscriber_id);

}  // namespace lockon::detail
