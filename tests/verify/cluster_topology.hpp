// verify/cluster_topology.hpp — the Redis Cluster topology (--topology cluster):
//
//   resource      redis-server, never faulted (the fenced resource)
//   cluster       3 masters with 1 replica each (test::RedisCluster,
//                 cluster-node-timeout 2 s, no persistence)
// Every worker reaches the cluster through one redis-cluster:// URL over all
// six nodes, with short socket and connect timeouts. No proxies: the faults
// are the cluster's own (slot migrations, manual failovers, stalls).
//
// Not thread-safe: the orchestrator's one thread drives it.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/cluster_fixture.hpp"
#include "support/redis_server.hpp"
#include "worker_pool.hpp"

namespace lockon::verify {

class ClusterTopology {
 public:
  /// Socket and connect timeouts of the workers' URL: short, so that a
  /// client stuck on a stopped master gives up (and asks another node for
  /// the map) quickly; within the checker's deadline tolerance.
  static constexpr const char* kClientQuery = "?socket_timeout=500ms&connect_timeout=300ms";

  explicit ClusterTopology(ClusterConfig config);
  ClusterTopology(const ClusterTopology&) = delete;
  ClusterTopology& operator=(const ClusterTopology&) = delete;

  test::RedisServer& resource() { return *resource_; }
  test::RedisCluster& cluster() { return *cluster_; }
  WorkerPool& workers() { return workers_; }
  /// The keys the workers lock (worker.cpp): lock_on's and Lock's keys,
  /// the read-write locks' and the semaphores'. Each one's companion keys
  /// (queue, fence counter, holder records) share its hash slot.
  const std::vector<std::string>& lock_keys() const { return lock_keys_; }
  /// CLUSTER KEYSLOT of `key`, asked of the first running node.
  int key_slot(const std::string& key) const;

 private:
  std::vector<std::string> worker_args() const;

  std::unique_ptr<test::RedisServer> resource_;
  std::unique_ptr<test::RedisCluster> cluster_;
  std::vector<std::string> lock_keys_;
  WorkerPool workers_;  // last: its processes die before the servers
};

}  // namespace lockon::verify
