// verify/verify.hpp — the modes of lockon_verify and their command lines.
//
//   lockon_verify run [--seconds N] [--seed S] [--dir D] [--workers W]
//                     [--threads T] [--keys K] [--ttl MS] [--faults all|none]
//                     [--long-hold-every N] [--topology standalone|sentinel|cluster]
//                     [--failover-timeout-ms MS] [--failover-window-ms MS]
//       Starts the servers, proxies and workers, injects faults (nemesis),
//       then checks the history. Exit 1 on any violation. --topology
//       sentinel: a master, 2 replicas and 3 sentinels instead of the lock
//       server and Redlock nodes (sentinel_cluster.hpp); failover-timeout is
//       the sentinels' (5000), failover-window how long after a promotion
//       the old master may still grant (1000; the checker's allowance).
//       --topology cluster: a Redis Cluster of 3 masters with a replica each
//       (cluster_topology.hpp), faulted by slot migrations, manual
//       failovers and short master stalls (cluster_nemesis.hpp).
//   lockon_verify check --dir D [--examples N]
//       Checks the history left in D by `run` (re-runnable on old runs).
//   lockon_verify worker ...   (started by `run`; see worker.cpp)
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

namespace lockon::verify {

/// "--name value" pairs.
class Args {
 public:
  Args(int argc, char** argv, int first) {
    for (int i = first; i + 1 < argc; i += 2) {
      std::string name = argv[i];
      if (name.rfind("--", 0) != 0) throw std::runtime_error("expected --option, got " + name);
      values_[name.substr(2)] = argv[i + 1];
    }
    if ((argc - first) % 2 != 0) throw std::runtime_error(std::string("option without value: ") + argv[argc - 1]);
  }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  long long number(const std::string& name, long long fallback) const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : std::stoll(it->second);
  }

 private:
  std::map<std::string, std::string> values_;
};

int run_worker(const Args& args);
int run_check(const Args& args);
/// Checks the history in `dir`, prints the summary; 0 when clean, 1 on any violation.
int run_check_dir(const std::filesystem::path& dir, int examples = 4);
int run_orchestrator(const Args& args, const std::string& self);

}  // namespace lockon::verify
