// verify/nemesis.hpp — faults injected while the workers run.
//
// One fault at a time, chosen from a seeded std::mt19937_64: the same seed
// gives the same sequence of faults, targets, durations and pauses between
// them (the wall-clock timing of each step is of course not replayed). Each
// fault is logged as a FaultRecord when it ends. kFaults (fault_kinds.hpp)
// lists every kind with the outcome it must have.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cluster.hpp"
#include "fault_kinds.hpp"
#include "history.hpp"
#include "worker_pool.hpp"

namespace lockon::verify {

class Nemesis {
 public:
  /// Draws the kinds of kFaults whose topologies include `topology`.
  Nemesis(WorkerPool& workers, unsigned topology, std::uint64_t seed, std::chrono::milliseconds ttl, LineLog& log);
  virtual ~Nemesis() = default;
  Nemesis(const Nemesis&) = delete;
  Nemesis& operator=(const Nemesis&) = delete;
  /// Injects faults one after the other until `end` (the fault in progress
  /// then finishes and is undone). Restarts workers that crashed meanwhile.
  void run_until(std::chrono::steady_clock::time_point end);
  const std::map<std::string, int>& counts() const { return counts_; }

 protected:
  using Millis = std::chrono::milliseconds;
  Millis between(double low_ttl, double high_ttl);
  int pick(int n) { return static_cast<int>(random_() % static_cast<std::uint64_t>(n)); }
  void record(std::string_view type, const std::string& target, std::int64_t start, const std::string& detail);
  void sleep_for(Millis duration);

  WorkerPool& workers_;
  std::chrono::milliseconds ttl_;
  std::chrono::steady_clock::time_point end_{};  // run_until's

 private:
  /// A fault of the topology's servers: `kind` is one of its kinds, not a
  /// worker fault (pause_short, pause_long, kill_worker: done here).
  virtual void inject_server_fault(std::string_view kind) = 0;
  /// Runs as each calm period ends, before the next fault (e.g. restarts a
  /// server a fault left down for a while).
  virtual void before_fault() {}
  void inject(std::string_view kind);

  LineLog& log_;
  std::mt19937_64 random_;
  std::map<std::string, int> counts_;
  std::vector<std::string_view> kinds_;
};

/// The standalone topology's faults: the lock server, its proxy, the Redlock
/// nodes and theirs.
class StandaloneNemesis final : public Nemesis {
 public:
  StandaloneNemesis(Cluster& cluster, std::uint64_t seed, std::chrono::milliseconds ttl, LineLog& log)
      : Nemesis(cluster.workers(), kStandalone, seed, ttl, log), cluster_(cluster) {}

 private:
  void inject_server_fault(std::string_view kind) override;
  test::FaultProxy& proxy_of(int target, std::string& name);

  Cluster& cluster_;
};

}  // namespace lockon::verify
