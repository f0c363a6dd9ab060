// verify/cluster.hpp — what the verification harness runs: the servers, one
// FaultProxy per lock server, and the worker processes.
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

namespace lockon::verify {

struct ClusterConfig {
  std::filesystem::path dir;     // logs go here
  std::string self;              // path of lockon_verify (workers are its "worker" mode)
  int workers = 4;
  int threads = 3;
  int keys = 8;
  std::chrono::milliseconds ttl{2000};
  std::chrono::milliseconds deadline{3000};
  std::chrono::microseconds hold{1000};  // inside each critical section
  int long_hold_every = 40;  // 1 in N Lock/lock_on sections holds 2.5 x ttl instead (0: never)
  std::int64_t until_ns = 0;     // workers stop starting sections then
  std::uint64_t seed = 1;
};

class Cluster {
 public:
  explicit Cluster(ClusterConfig config);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  test::RedisServer& resource() { return *resource_; }
  test::RedisServer& lock_server() { return *lock_; }
  test::RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  std::size_t node_count() const { return nodes_.size(); }
  test::FaultProxy& lock_proxy() { return *lock_proxy_; }
  test::FaultProxy& node_proxy(std::size_t i) { return *node_proxies_.at(i); }

  void start_workers();
  int worker_count() const { return static_cast<int>(workers_.size()); }
  /// "w<id>.<incarnation>" of the current process of worker `id`.
  std::string worker_name(int id) const;
  pid_t worker_pid(int id) const { return workers_.at(static_cast<std::size_t>(id)).pid; }
  /// SIGKILL, reap, start a new incarnation.
  void kill_and_restart_worker(int id);
  /// Restarts workers that exited early (a crash), reporting each on stderr.
  /// Returns how many it restarted.
  int restart_crashed_workers();
  /// Waits until `deadline` for every worker to exit; SIGKILLs the rest.
  /// Returns the names of those that had to be killed (hung).
  std::vector<std::string> finish_workers(std::chrono::steady_clock::time_point deadline);

  /// kill -9 the lock server, then restart it on the same port and dir; with
  /// `keep_data` false its AOF is deleted first (a restart without persistence).
  void restart_lock_server(bool keep_data);

 private:
  struct Worker {
    int id = 0;
    int incarnation = 0;
    pid_t pid = -1;
  };
  void spawn(Worker& worker);

  ClusterConfig config_;
  std::unique_ptr<test::RedisServer> resource_;
  std::unique_ptr<test::RedisServer> lock_;
  std::vector<std::unique_ptr<test::RedisServer>> nodes_;
  std::shared_ptr<test::FaultProxy::Thread> proxy_thread_;
  std::unique_ptr<test::FaultProxy> lock_proxy_;
  std::vector<std::unique_ptr<test::FaultProxy>> node_proxies_;
  std::vector<Worker> workers_;
};

}  // namespace lockon::verify
