// verify/worker_pool.hpp — the worker processes of a verification run, the
// same for every topology: spawned as `lockon_verify worker`, killed and
// restarted by the nemesis, reaped at the end. What differs per topology
// (the lock server's URL, Redlock's nodes) comes from `topology_args`.
//
// Not thread-safe: the orchestrator's one thread drives it.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

class WorkerPool {
 public:
  /// `topology_args(id)`: the worker options naming the servers worker `id`
  /// talks to ("--lock-url", ...), appended to the common ones.
  using TopologyArgs = std::function<std::vector<std::string>(int id)>;
  WorkerPool(ClusterConfig config, TopologyArgs topology_args);
  /// SIGKILLs every worker still running.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void start();
  int count() const { return static_cast<int>(workers_.size()); }
  /// "w<id>.<incarnation>" of the current process of worker `id`.
  std::string name(int id) const;
  pid_t pid(int id) const { return workers_.at(static_cast<std::size_t>(id)).pid; }
  /// SIGKILL, reap, start a new incarnation.
  void kill_and_restart(int id);
  /// Restarts workers that exited early (a crash), reporting each on stderr.
  /// Returns how many it restarted.
  int restart_crashed();
  /// Waits until `deadline` for every worker to exit; SIGKILLs the rest.
  /// Returns the names of those that had to be killed (hung).
  std::vector<std::string> finish(std::chrono::steady_clock::time_point deadline);

 private:
  struct Worker {
    int id = 0;
    int incarnation = 0;
    pid_t pid = -1;
  };
  void spawn(Worker& worker);

  ClusterConfig config_;
  TopologyArgs topology_args_;
  std::vector<Worker> workers_;
};

}  // namespace lockon::verify
