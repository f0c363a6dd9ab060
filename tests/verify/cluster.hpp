// verify/cluster.hpp — the standalone topology: the servers, one
// FaultProxy per lock server, and the worker processes (WorkerPool).
//
//   resource      redis-server, never faulted (the fenced resource)
//   lock          redis-server with appendonly yes + appendfsync always, so a
//                 restart can keep (kill + restart) or lose (AOF wiped) data
//   node0..2      Redlock's masters, no persistence
// Workers reach every lock server through its proxy only.
//
// Not thread-safe: the orchestrator's one thread drives it.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"
#include "worker_pool.hpp"

namespace lockon::verify {

class Cluster {
 public:
  explicit Cluster(ClusterConfig config);
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  test::RedisServer& resource() { return *resource_; }
  test::RedisServer& lock_server() { return *lock_; }
  test::RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  std::size_t node_count() const { return nodes_.size(); }
  test::FaultProxy& lock_proxy() { return *lock_proxy_; }
  test::FaultProxy& node_proxy(std::size_t i) { return *node_proxies_.at(i); }

  WorkerPool& workers() { return workers_; }

  /// kill -9 the lock server, then restart it on the same port and dir; with
  /// `keep_data` false its AOF is deleted first (a restart without persistence).
  void restart_lock_server(bool keep_data);

 private:
  std::vector<std::string> worker_args() const;

  ClusterConfig config_;
  std::unique_ptr<test::RedisServer> resource_;
  std::unique_ptr<test::RedisServer> lock_;
  std::vector<std::unique_ptr<test::RedisServer>> nodes_;
  std::shared_ptr<test::FaultProxy::Thread> proxy_thread_;
  std::unique_ptr<test::FaultProxy> lock_proxy_;
  std::vector<std::unique_ptr<test::FaultProxy>> node_proxies_;
  WorkerPool workers_;  // last: its processes die before the servers
};

}  // namespace lockon::verify
