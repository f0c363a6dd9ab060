// verify/cluster_nemesis.hpp — the Cluster topology's faults (fault_kinds.hpp):
// slot_migration (a slot of one of the workers' keys moved to another master
// step by step, each state held while the workers run), cluster_failover
// (CLUSTER FAILOVER on a replica: coordinated, no write lost),
// master_stall_short (a master SIGSTOPped well below cluster-node-timeout),
// and the worker faults of every topology (Nemesis).
//
// Before each fault of a server the nemesis waits (bounded) until the
// cluster is settled (test::RedisCluster::wait_settled: every node agrees on
// roles, epochs and slots, replicas in sync), else logs a settle_timeout
// record and injects the fault anyway: a fault on a cluster still
// converging tests the cluster's gossip, not the clients.
#pragma once
#include <chrono>
#include <string>

#include "cluster_topology.hpp"
#include "nemesis.hpp"

namespace lockon::verify {

class ClusterNemesis final : public Nemesis {
 public:
  ClusterNemesis(ClusterTopology& topology, std::uint64_t seed, std::chrono::milliseconds ttl, LineLog& log)
      : Nemesis(topology.workers(), kCluster, seed, ttl, log), topology_(topology) {}

 private:
  void inject_server_fault(std::string_view kind) override;
  void slot_migration();
  void cluster_failover();
  void master_stall_short();
  /// Returns false when the run's end came first (nothing to inject).
  bool wait_settled();
  /// A duration in [low, high] ms, from the seeded sequence (not in TTLs:
  /// these bounds are the cluster's, e.g. its node timeout).
  Millis span(int low, int high) { return Millis(low + pick(high - low + 1)); }

  ClusterTopology& topology_;
};

}  // namespace lockon::verify
