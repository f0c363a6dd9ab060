// When a hand-over message proves a grant, for the blocking waiters (Lock,
// lock_wait.cpp; ReadWriteLock/Semaphore, shared_holder.cpp). Internal.
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

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

#include "client/client_impl.hpp"
#include "lock/subscriber.hpp"

namespace lockon::detail {

/// Tests only (null otherwise): called by a blocking Lock's waiter right
/// after it sampled its subscriber's connection generation for an attempt
/// and before it sends that attempt (Lock::Impl::attempt_in_line), so a test
/// can have the slot move in between (test_cluster_wake_trust.cpp). Set it
/// before the waiting thread starts and reset it after it ended.
inline void (*after_heard_sampled_for_tests)() = nullptr;

inline bool wake_proves_grant(const Subscriber::Watch& watch, std::uint64_t heard, ClientImpl& client,
                              std::string_view name, const std::shared_ptr<Node>& listening_node, bool sharded) {
  std::uint64_t delivered_by = 0;
  {
    auto& slot = watch.slot();
    std::lock_guard lock(slot.mutex);
    delivered_by = slot.handed_generation;
  }
  if (delivered_by == 0 || delivered_by != heard) return false;
  if (sharded) return true;
  try {
    // Cached (Sentinel may start a resolution in the background, never waits).
    return client.node_for(name, std::chrono::steady_clock::now()) == listening_node;
  } catch (...) {
    return false;
  }
}

}  // namespace lockon::detail
