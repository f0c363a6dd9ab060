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

#include "cluster.hpp"
#include "fault_kinds.hpp"
#include "history.hpp"

namespace lockon::verify {

class Nemesis {
 public:
  Nemesis(Cluster& cluster, std::uint64_t seed, std::chrono::milliseconds ttl, LineLog& log);
  /// Injects faults one after the other until `end` (the fault in progress
  /// then finishes and is undone). Restarts workers that crashed meanwhile.
  void run_until(std::chrono::steady_clock::time_point end);
  const std::map<std::string, int>& counts() const { return counts_; }

 private:
  using Millis = std::chrono::milliseconds;
  Millis between(double low_ttl, double high_ttl);
  int pick(int n) { return static_cast<int>(random_() % static_cast<std::uint64_t>(n)); }
  void inject(std::string_view kind);
  void record(std::string_view type, const std::string& target, std::int64_t start, const std::string& detail);
  void sleep_for(Millis duration);
  test::FaultProxy& proxy_of(int target, std::string& name);

  Cluster& cluster_;
  std::chrono::milliseconds ttl_;
  LineLog& log_;
  std::mt19937_64 random_;
  std::map<std::string, int> counts_;
};

}  // namespace lockon::verify
