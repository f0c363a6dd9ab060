// The Lua scripts of the single-instance lock, and the names of the keys and
// channels that accompany a lock key.
//
// For a lock key K (K itself holds the owner's token as a plain string,
// exactly like redis-py's Lock, so other clients interoperate):
//   companion(K, "q")      LIST of waiting lockon waiters, FIFO. An entry is
//                          "<subscriber id>|<waiter id>|<ttl ms>|<fenced 0/1>|<token>"
//   companion(K, "fence")  counter, INCRed per fenced acquisition
//   companion(K, "hf")     "<token> <fence>" of the last fenced hand-over, for a
//                          waiter that missed its wake-up message
//   companion(K, "wake:<subscriber id>")  pub/sub channel of one waiting process
//                          (per Client) for K; payload "<waiter id> <fence>"
//                          tells a waiter it now owns K
//
// Hand-over: a release pops the first waiter, sets K to that waiter's token
// (with its TTL) and publishes to its process. The waiter returns at once,
// with no further round trip. PUBLISH answers how many subscribers got the
// message: 0 means the waiter's subscriber is gone (process dead, or its
// subscription down), so the script moves on to the next waiter. Newcomers cannot barge
// in: K is never free while a live waiter is queued.
#pragma once

#include <string>
#include <string_view>

#include "script.hpp"

namespace lockon::detail {

/// `K` + suffix in K's hash slot: K's own hash tag if it has a non-empty
/// one, else "{K}:suffix".
std::string companion_key(std::string_view key, std::string_view suffix);

/// The channel on which subscriber `subscriber_id` (Subscriber::id()) hears
/// of hand-overs of `key`: in key's hash slot, like the companion keys.
std::string wake_channel(std::string_view key, std::string_view subscriber_id);

namespace scripts {

/// KEYS: lock, queue, fence counter, hand-over fence.
/// ARGV: queue entry, enqueue-if-missing ("1"/"0"), queue ttl ms.
/// Acquires when K holds this entry's token (handed over) or when K is free
/// and this waiter is first in line (handing over to the first live waiter
/// ahead otherwise). Else queues the entry (if asked) and returns K's PTTL.
/// Returns {1, fence} when acquired, else {0, pttl} (pttl -1: no expiry,
/// -2: free and just handed to a waiter ahead).
const Script& wait_attempt();

/// KEYS: lock, queue, fence counter, hand-over fence. ARGV: token.
/// If K holds the token: hands K to the first live waiter or deletes it.
/// Returns 1 if released, 0 if not owned.
const Script& release();

/// KEYS: lock. ARGV: token, ms, replace ("1"/"0").
/// Returns 1 if extended, 0 if not owned, -1 if the key has no expiry.
const Script& extend();

/// KEYS: lock. ARGV: token, ttl ms, only-grow ("1": PEXPIRE GT, never
/// shortening a hand-extended lease; "0": reset to ttl). Returns 1 or 0.
const Script& renew();

/// KEYS: lock, queue, fence counter, hand-over fence. ARGV: queue entry.
/// Removes a waiter that gives up; if K was handed to it meanwhile, passes
/// K on to the next live waiter. Returns 1 if K had been handed to it.
const Script& cancel_wait();

}  // namespace scripts
}  // namespace lockon::detail
