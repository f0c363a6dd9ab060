// The Lua scripts of the single-instance lock, and the names of the keys and
// channel that accompany a lock key.
//
// Key layout for a lock key K (K itself holds the token as a plain string,
// exactly like redis-py's Lock, so other clients interoperate):
//   companion(K, "q")      LIST  of waiting lockon waiter ids, FIFO
//   companion(K, "qt")     HASH  waiter id -> deadline (ms, server clock)
//   companion(K, "fence")  STRING counter, INCRed per fenced acquisition
//   channel "lockon:wake:" + K   PUBLISH target of release (payload: the
//                                 id of the waiter at the head of the queue)
// Companions share K's cluster hash slot (see companion_key).
#pragma once

#include <string>
#include <string_view>

#include "script.hpp"

namespace lockon::detail {

/// `K` + suffix in K's hash slot: K's own hash tag if it has a non-empty
/// one, else "{K}:suffix".
std::string companion_key(std::string_view key, std::string_view suffix);

/// The wake-up channel of lock key K.
std::string wake_channel(std::string_view key);

namespace scripts {

/// KEYS: lock, queue, queue deadlines, fence counter.
/// ARGV: token, ttl ms (0 = no expiry), waiter id ("" = do not queue),
///       queue lease ms, fencing ("1"/"0").
/// Takes K if it is free and no live waiter is ahead, or if K is reserved
/// for this waiter ("lockon-reserved:<id>", set by release's hand-over).
/// Otherwise queues/refreshes the waiter (when an id is given).
/// Returns {1, fence} when acquired, else {0, holder's PTTL (-1: no expiry,
/// -2: free but an earlier waiter is first in line)}.
const Script& acquire();

/// KEYS: lock, queue, queue deadlines. ARGV: token, channel, reservation ms.
/// If K holds the token: hands the lock to the first live waiter (K becomes
/// "lockon-reserved:<id>" for reservation ms, and <id> is published) or
/// deletes K when nobody waits. Returns 1 if released, 0 if not owned.
const Script& release();

/// KEYS: lock. ARGV: token, ms, replace ("1"/"0").
/// Returns 1 if extended, 0 if not owned, -1 if the key has no expiry.
const Script& extend();

/// KEYS: lock. ARGV: token, ttl ms, only-grow ("1": PEXPIRE GT, never
/// shortening a hand-extended lease; "0": reset to ttl). Returns 1 or 0.
const Script& renew();

/// KEYS: lock, queue, queue deadlines. ARGV: waiter id, channel, reservation ms.
/// Removes a waiter that gives up; a reservation it was just handed passes
/// to the next live waiter.
const Script& cancel_wait();

}  // namespace scripts
}  // namespace lockon::detail
