// The Lua scripts of the single-instance lock, and the names of the keys and
// channels that accompany a lock key.
//
// For a lock key K (K itself holds the owner's token as a plain string,
// exactly like redis-py's Lock, so other clients interoperate):
//   companion(K, "q")      LIST of waiting lockon waiters, FIFO. An entry is
//                          "<subscriber id>|<waiter id>|<ttl ms>|<fenced 0/1>|<token>"
//   companion(K, "fence")  the last fence handed out for K. Every fence is
//                          max(last + 1, server TIME in µs) (next_fence_at),
//                          on the uncontended path too (fenced_acquire()): a
//                          counter that came back missing or stale after a
//                          restart or a failover cannot repeat a fence, as
//                          long as the server clock does not step back. (A
//                          bare INCR did, with a stale counter: session 17.)
//                          The counter expires an hour after its last use.
//   companion(K, "hf")     "<waiter id> <fence>" of the last hand-over: how a
//                          waiter that missed its wake-up message knows K was
//                          handed to *it* (not merely set to an equal token)
//   companion(K, "who")    the holder record (protocol/holder_record.hpp); "qwho" the
//                          queued waiters' records (HASH waiter id -> record)
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

#include <atomic>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "client/script.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {
class ClientImpl;
}

namespace lockon::detail {

/// `K` + suffix in K's hash slot (client/slots.hpp): "K:suffix" if K has a
/// non-empty hash tag, "{K}:suffix" if K has no '}', else "{T}K:suffix"
/// with T = tag_for_slot(slot of K). Distinct keys give distinct results.
std::string companion_key(std::string_view key, std::string_view suffix);

/// The keys the queue scripts (wait_attempt, release,
/// cancel_wait) are given, in KEYS order: K, "q", "fence", "hf", "who",
/// "qwho", "hs" (the process the last hand-over went to). Every key a script touches is declared (Redis's scripting rule,
/// which servers and proxies such as Dragonfly and cloud cluster proxies
/// enforce; tests/integration/test_script_keys.cpp checks it on a real
/// server); all share K's hash slot.
inline constexpr std::size_t kLockScriptKeys = 7;
using LockScriptKeys = std::array<std::string, kLockScriptKeys>;
LockScriptKeys lock_script_keys(std::string_view key);
/// Views of `keys`, as the script calls take them.
inline std::array<std::string_view, kLockScriptKeys> key_views(const LockScriptKeys& keys) noexcept {
  std::array<std::string_view, kLockScriptKeys> views;
  for (std::size_t i = 0; i < kLockScriptKeys; ++i) views[i] = keys[i];
  return views;
}

/// The channel on which subscriber `subscriber_id` (Subscriber::id()) hears
/// of hand-overs of `key`: in key's hash slot, like the companion keys.
std::string wake_channel(std::string_view key, std::string_view subscriber_id);

/// Whether `client`'s wake-ups use sharded pub/sub (SPUBLISH/SSUBSCRIBE):
/// on a Redis Cluster.
bool sharded_wake(const ClientImpl& client) noexcept;

namespace scripts {

// wait_attempt, release and cancel_wait hand the lock over and publish the
// wake-up: with PUBLISH, or with SPUBLISH when `sharded` (Redis Cluster;
// see sharded_wake()).

/// KEYS: lock, queue, fence counter, hand-over record.
/// ARGV: queue entry, enqueue-if-missing ("1"/"0"), queue ttl ms, token is
/// random ("1": K holding it can only mean an earlier attempt of ours won).
/// Acquires when K was handed to this entry or when K is free and this
/// waiter is first in line (handing over to the first live waiter ahead
/// otherwise). Else queues the entry (if asked) and returns K's PTTL.
/// Returns {1, fence, denied, 0} when acquired, {0, pttl, denied, ahead}
/// when not (pttl -1: no expiry, -2: free and just handed to a waiter
/// ahead; ahead: entries queued before this one), and {-1, 0, denied, 0}
/// when K holds this caller-chosen token for someone else.
/// denied = 1 when a wake-up could not be published (ACL channel rights).
const Script& wait_attempt(bool sharded = false);

/// The fenced fast path: SET NX [PX] GET and the next fence in one script.
/// KEYS: lock, fence counter. ARGV: token, ttl ms ('0': no expiry).
/// {1, fence}: acquired. {0, holder's token}: held; {0, token, fence} when
/// the holder's token is the caller's (a retry after a lost reply).
const Script& fenced_acquire();

/// KEYS: lock, queue, fence counter, hand-over record. ARGV: token.
/// If K holds the token: hands K to the first live waiter or deletes it.
/// Returns 1 if released, 2 if released but a wake-up could not be
/// published (ACL channel rights), 0 if not owned.
const Script& release(bool sharded = false);

/// KEYS: lock [, holder record [, hand-over subscriber record]]. ARGV:
/// token, ms, replace ("1"/"0") [, the lease's ttl ms, the holder's
/// subscriber id]. As renew(): the holder record expires with the longer
/// lease; the hand-over subscriber record, if it names that subscriber id,
/// one ttl after. Returns 1 if extended, 0 if not owned, -1 if the key has
/// no expiry.
const Script& extend();

/// KEYS: lock [, holder record [, hand-over subscriber record]]. ARGV:
/// token, ttl ms, only-grow ("1": PEXPIRE GT, never shortening a
/// hand-extended lease; "0": reset to ttl) [, the holder's subscriber id].
/// The holder record expires with the lease; the hand-over subscriber
/// record, if it names that subscriber id, one ttl after. Returns 1 or 0.
const Script& renew();

/// KEYS: holder record. ARGV: record. Deletes the key if it still holds
/// that record (an attempt whose SET failed takes its record back, never
/// the holder's). Returns 1 if deleted, 0 if not.
const Script& delete_record();
/// KEYS: K, its holder record key; ARGV: token, record. While K holds the
/// token, the record is set to ours with K's expiry: the fast path's SET NX
/// of the record failed (an earlier holder's record). 1 if set.
const Script& replace_record();

/// KEYS: lock, queue, fence counter, hand-over record. ARGV: queue entry.
/// Removes a waiter that gives up; if K holds its token (handed to it
/// meanwhile, or won by an attempt whose reply was lost), passes K on to the
/// next live waiter. Returns 1 if K held its token (3: and a wake-up could
/// not be published), else 0.
const Script& cancel_wait(bool sharded = false);

/// KEYS: as cancel_wait (only the queue is used). ARGV: queue entry, the
/// same waiter's entry under another subscriber id. Puts the second in the
/// first's place (a waiter that follows a Sentinel failover to the new
/// master's subscriber keeps its turn). Returns 1 if replaced, 0 if the
/// first was not queued (the waiter's next attempt queues it again).
const Script& move_wait();

/// MultiLock's single script (src/multi/one_script.cpp), all keys in one
/// hash slot (or on one non-cluster server). KEYS: per lock key, in order:
/// lock, queue, fence counter, holder record ("who") — 4 per key.
/// ARGV: token, ttl ms ("0": no expiry), fenced ("1"/"0"), holder record
/// ("": none). Takes every key or none: only if every key is free and has
/// nobody queued (a queued waiter is never jumped) does it set every key to
/// the token with the ttl, raise each key's fence (as a hand-over does:
/// max(last + 1, server TIME in µs)) and write the holder record. Returns
/// {1, fence_1, ..., fence_n} (0 without fencing), or {0, i, why} with i
/// the first unavailable key (1-based) and why 1 = held, 2 = free but
/// waiters queued; then nothing was written.
const Script& acquire_all();

}  // namespace scripts
}  // namespace lockon::detail
