// Redis Cluster (issue 14): what routing costs, and how load spreads.
//
// BM_ClusterVsSingleAlternating: the uncontended Lock cycle on one server
// and on a 3-master cluster (no replicas: a replica's replication stream
// would tax the cluster's masters on this 2-core machine and measure that
// instead of the routing), in alternating blocks inside one measurement so
// drift hits both alike. ratio_cluster = cluster cycles/s / single cycles/s;
// ratio_routing = through the cluster client / the same master addressed as
// a plain server (what routing itself costs).
//
// BM_ClusterSixteenThreads: 16 threads, each cycling over 64 keys of its own
// (1,024 keys spread over the slots), for 2 s: total cycles/s, and each
// master's command count from INFO commandstats (max/min across masters).
// This machine has 2 cores shared with the servers: it cannot show scaling,
// only that the work is spread evenly.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "client/slots.hpp"
#include "lockon/lockon.hpp"
#include "support/cluster_fixture.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlock = 200;
constexpr int kRounds = 40;

lockon::test::RedisCluster& cluster() {
  static const auto instance = std::make_unique<lockon::test::RedisCluster>(3, 0);
  return *instance;
}

long long total_calls(const lockon::test::RedisServer& server) {
  const auto reply = server.command({"INFO", "commandstats"});
  std::istringstream lines(reply.str);
  long long calls = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("calls=");
    if (line.rfind("cmdstat_", 0) != 0 || at == std::string::npos) continue;
    if (line.rfind("cmdstat_info", 0) == 0 || line.rfind("cmdstat_cluster", 0) == 0) continue;
    calls += std::stoll(line.substr(at + 6));
  }
  return calls;
}

void BM_ClusterVsSingleAlternating(benchmark::State& state) {
  const std::string name = "bench:cluster:alt";
  const lockon::Client single(lockon::bench::server_url());
  const lockon::Client clustered(cluster().url());
  // The same master the cluster client routes to, as a plain server: the
  // difference to the cluster variant is the routing alone (the cluster vs
  // single difference also includes a cluster-enabled server's own cost).
  const auto& owner = cluster().owner_of_slot(lockon::detail::key_slot(name));
  const lockon::Client direct("redis://127.0.0.1:" + std::to_string(owner.port()));
  struct Variant {
    const char* name;
    std::unique_ptr<lockon::Lock> lock;
    double seconds = 0;
  };
  std::vector<std::unique_ptr<Variant>> variants;
  variants.push_back(std::make_unique<Variant>(Variant{"single", std::make_unique<lockon::Lock>(single, name)}));
  variants.push_back(std::make_unique<Variant>(Variant{"cluster", std::make_unique<lockon::Lock>(clustered, name)}));
  variants.push_back(std::make_unique<Variant>(Variant{"direct", std::make_unique<lockon::Lock>(direct, name)}));
  for (auto _ : state) {
    for (auto& v : variants) v->seconds = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (auto& v : variants) {
        const auto start = Clock::now();
        for (int i = 0; i < kBlock; ++i) {
          if (!v->lock->try_lock()) throw std::runtime_error("busy");
          v->lock->unlock();
        }
        v->seconds += std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
  }
  for (const auto& v : variants)
    state.counters[std::string("us_per_cycle_") + v->name] = 1e6 * v->seconds / (kRounds * kBlock);
  state.counters["ratio_cluster"] = variants[0]->seconds / variants[1]->seconds;
  state.counters["ratio_routing"] = variants[2]->seconds / variants[1]->seconds;
}
BENCHMARK(BM_ClusterVsSingleAlternating)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

void BM_ClusterSixteenThreads(benchmark::State& state) {
  constexpr int kThreads = 16;
  constexpr int kKeysPerThread = 64;
  const lockon::Client client(cluster().url(), {.size = kThreads});
  const auto masters = cluster().masters();
  std::vector<long long> before;
  for (const auto* master : masters) before.push_back(total_calls(*master));
  long long cycles = 0;
  double seconds = 0;
  for (auto _ : state) {
    std::atomic<long long> done{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    const auto start = Clock::now();
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::unique_ptr<lockon::Lock>> locks;
        for (int k = 0; k < kKeysPerThread; ++k)
          locks.push_back(std::make_unique<lockon::Lock>(
              client, "bench:cluster:t" + std::to_string(t) + ":" + std::to_string(k)));
        long long mine = 0;
        for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          auto& lock = *locks[i % locks.size()];
          if (!lock.try_lock()) throw std::runtime_error("busy");
          lock.unlock();
          ++mine;
        }
        done += mine;
      });
    }
    std::this_thread::sleep_for(std::chrono::seconds(2));
    stop = true;
    for (auto& thread : threads) thread.join();
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    cycles += done.load();
  }
  std::vector<double> per_master;
  for (std::size_t m = 0; m < masters.size(); ++m)
    per_master.push_back(static_cast<double>(total_calls(*masters[m]) - before[m]));
  const auto [lo, hi] = std::minmax_element(per_master.begin(), per_master.end());
  state.counters["cycles_per_s"] = static_cast<double>(cycles) / seconds;
  for (std::size_t m = 0; m < per_master.size(); ++m)
    state.counters["commands_master" + std::to_string(m)] = per_master[m];
  state.counters["max_over_min_commands"] = *hi / std::max(1.0, *lo);
}
BENCHMARK(BM_ClusterSixteenThreads)->Iterations(1)->Repetitions(1)->UseRealTime();

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "alternating blocks: Lock on a 3-master cluster / on one server (cycles/s)",
                  .subject = "BM_ClusterVsSingleAlternating", .metric = "ratio_cluster", .target = 0.90});
  register_ratio({.label = "alternating blocks: Lock via cluster routing / same master as a plain server (cycles/s)",
                  .subject = "BM_ClusterVsSingleAlternating", .metric = "ratio_routing", .target = 0.90});
  register_ratio({.label = "16 threads on a cluster: busiest / idlest master's command count",
                  .subject = "BM_ClusterSixteenThreads", .metric = "max_over_min_commands", .target = 1.25,
                  .higher_is_better = false});
  return true;
}();

}  // namespace
