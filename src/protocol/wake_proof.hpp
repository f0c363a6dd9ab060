// When a hand-over message proves a grant: the rule every waiter follows
// (blocking Lock and ReadWriteLock/Semaphore through lock/wake_proof.hpp,
// AsyncLock in async_lock_wait.cpp). No I/O: each front supplies what it
// knows of its subscriber and of the node serving the name.
//
// A release hands K over and PUBLISHes the wake-up; the script reads the
// receiver count as "that waiter's process still listens" (0: the grant is
// withdrawn and K goes to the next waiter). That count is the master's own
// subscribers, but outside a cluster Redis also propagates PUBLISH to the
// replicas, which deliver it to theirs. After a Sentinel failover a
// subscriber reconnects to the old master's address, now a replica (the
// sentinels demote it with CLIENT KILL TYPE pubsub): a release on the new
// master counts our wake-up unheard and hands K on, and the replica
// delivers it all the same — two holders
// (SentinelReplicaWake.WakeUpDeliveredByTheDemotedMasterIsNotAGrant). So a
// message is proof without a round trip only if
//   (a) it came from the subscriber of the node that serves the name now,
//       as the client knows it without resolving (unknown counts as no),
//   (b) over the connection that was up, our channel subscribed, when the
//       waiter sent its last attempt (`heard`, sampled with
//       Watch::connection_generation() before it): a connection that
//       stayed up to a master since, not one a demotion killed.
// Otherwise the waiter's next attempt decides: a real hand-over is taken
// there (K holds our token, the record names us); on a replica it fails
// with READONLY, never grants. On a Cluster (a) is not asked: a slot that
// leaves a node unsubscribes its shard channel there (the subscriber
// reports it and the waiter follows the slot), and the map lookup could
// re-read the map, a round trip per node, inside a hand-over.
#pragma once

#include <cstdint>

namespace lockon::detail {

/// `delivered_by`: the subscriber connection generation that delivered the
/// hand-over (0: none); `heard`: the generation sampled before the waiter's
/// last attempt; `sharded`: a Cluster's sharded channel (no check (a));
/// `serves_now()`: whether the subscriber's node serves the name now, as
/// the client knows it without a round trip (asked last; false if unknown).
template <class ServesNow>
bool wake_proves_grant(std::uint64_t delivered_by, std::uint64_t heard, bool sharded, ServesNow&& serves_now) {
  if (delivered_by == 0 || delivered_by != heard) return false;
  return sharded || static_cast<bool>(serves_now());
}

}  // namespace lockon::detail
