// The Lua scripts behind ReadWriteLock and Semaphore: several holders of
// one name, each with a lease of its own.
//
// For a name K (companion keys in K's hash slot, so Redis Cluster works):
//   companion(K, "sh")  ZSET of holders: member "<kind>:<token>", score = the
//                       share's expiry in ms of the server's clock (TIME).
//                       Every script first drops the members whose score has
//                       passed: a crashed holder's share ends with its TTL,
//                       without anyone deleting it.
//   companion(K, "sq")  LIST of waiters, FIFO; an entry is
//                       "<subscriber id>|<waiter id>|<ttl ms>|<kind>|<token>"
//   companion(K, "shs") HASH share member -> subscriber id of the process a
//                       hand-over granted it to, or that queued a waiter
//                       behind it, for two leases (renewals keep it): a
//                       lapsed one drops that process's queue entries, as
//                       the Lock's {K}:hs does.
//   companion(K, "wake:<subscriber id>")  the Lock's wake channel (one per
//                       waiting process); payload "<waiter id> 0"
// Kinds: 'x' exclusive (a writer: only when nobody holds), 's' shared (a
// reader: while no writer holds), 'p' permit (while fewer than `limit` hold).
//
// Fairness: a newcomer is granted at once only when nobody waits; otherwise
// it queues. Every script that frees room hands it to the queue's head, and
// keeps going while the next head fits too (consecutive readers, several
// permits), each grant published to the waiter's process. A waiter whose
// process no longer listens (PUBLISH reaches nobody) is dropped and the hand-
// over moves on, exactly like the Lock's.
#pragma once

#include "client/script.hpp"

namespace lockon::detail::shared_scripts {

// Every script: KEYS = holders, queue, hand-over record. ARGV[1] = wake channel prefix
// (companion_key(K, "wake:")), ARGV[2] = permit limit (0 unless 'p').
// `sharded`: wake-ups with SPUBLISH (Redis Cluster).

/// ARGV[3] = own entry, ARGV[4] = mode: "0" try only (never queues), "1"
/// queue at the tail if not granted, "r" resume (queue again if the entry was
/// dropped), ARGV[5] = queue ttl ms, ARGV[6] = "1" for a caller-chosen
/// token, else "0". Entering the queue, it records in KEYS[3] the shares
/// held by the entry's process (by the nonce its subscriber id and their
/// tokens end in) as that process's. A caller-chosen token ends in no nonce:
/// its grant is recorded at once, under the entry's id ("-.<nonce>" for a
/// first attempt, subscriber_or_process_id).
/// Returns {1, 0, denied} when this entry holds a share (granted now or by an
/// earlier hand-over; the lease restarts now), {0, ms, denied} when not: ms
/// until the earliest holder's share expires (-1: no holder).
/// denied = 1 when a wake-up could not be published (ACL channel rights).
const Script& attempt(bool sharded);

/// ARGV[3] = member. Removes the share and hands room to the waiters.
/// Returns {1 released / 0 not held (expired or never), denied}.
const Script& release(bool sharded);

/// ARGV[3] = entry. A waiter gives up: drops its queue entry and any share
/// handed to it meanwhile (passing it on). Returns 1 if it held a share.
const Script& cancel(bool sharded);

/// ARGV[3] = member, ARGV[4] = ttl ms. Restarts the share's lease.
/// Returns 1, or 0 when the share is gone (expired, released).
const Script& renew(bool sharded);

}  // namespace lockon::detail::shared_scripts
