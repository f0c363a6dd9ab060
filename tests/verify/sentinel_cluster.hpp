// verify/sentinel_cluster.hpp — the Sentinel topology (--topology sentinel):
//
//   resource      redis-server, never faulted (the fenced resource)
//   data servers  a master and 2 replicas, no persistence (test::SentinelSet)
//   sentinels     3 (quorum 2, down-after 1 s, failover-timeout as asked)
// Worker i reaches the master through a redis-sentinel:// URL listing the
// sentinels rotated by i (a fleet never lists them in one order), with
// short socket and connect timeouts, and records the master's port per
// section (--record-port). No proxies: the faults are the servers' own.
//
// Not thread-safe: the orchestrator's one thread drives it (RoleWatcher
// only reads ports).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"
#include "support/sentinel_fixture.hpp"
#include "worker_pool.hpp"

namespace lockon::verify {

class SentinelCluster {
 public:
  /// Socket and connect timeouts of the workers' URLs: short, so that a
  /// client stuck on a dead or stopped master gives up (and re-resolves)
  /// quickly; within the checker's 1 s deadline tolerance.
  static constexpr const char* kClientQuery = "?socket_timeout=500ms&connect_timeout=300ms";

  SentinelCluster(ClusterConfig config, std::chrono::milliseconds failover_timeout);
  SentinelCluster(const SentinelCluster&) = delete;
  SentinelCluster& operator=(const SentinelCluster&) = delete;

  test::RedisServer& resource() { return *resource_; }
  test::SentinelSet& sentinels() { return *sentinels_; }
  WorkerPool& workers() { return workers_; }
  /// The data servers' ports, by index (data_server(i)).
  std::vector<int> data_ports() const;
  /// Index of the data server the sentinels name as master (the first that
  /// answers), else of the first whose ROLE says master; -1 if none.
  int master_index();
  /// The master's port when the deployment has settled, else 0. Settled:
  /// every sentinel answers, names that port and has no failover in
  /// progress; it says ROLE master; every other running data server says
  /// slave of it. Between a promotion and that moment (the old master is
  /// reconfigured 4-11 s after the promotion) a fault of the new master
  /// makes Sentinel itself keep two masters and send clients back and forth
  /// (verify seed 3: a second failover 1.4 s after one, the sentinels went
  /// back to the stalled master while the promoted one stayed master 17 s).
  int settled_master();

 private:
  std::vector<std::string> worker_args(int id) const;

  std::unique_ptr<test::RedisServer> resource_;
  std::unique_ptr<test::SentinelSet> sentinels_;
  WorkerPool workers_;  // last: its processes die before the servers
};

}  // namespace lockon::verify
