// Redlock over N = 5 with a frozen minority: two of the five servers are
// SIGSTOPped for the whole measurement. An acquisition or an unlock is
// decided once a majority answered; the frozen nodes cost neither (they are
// suspected after the first miss and probed every 100 ms).
//
// Baseline in the same run: an identical Redlock over five other servers,
// all up. The two run in alternating blocks of cycles so the VM's drift hits
// both alike. Reported: acquire and unlock p50/p99 for each, and the ratios
// paused / all-up (targets: acquire p50 <= 2x, unlock p50 <= 2x).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "lockon/redlock.hpp"
#include "support/redis_server.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double percentile_us(std::vector<double>& samples, double p) {
  if (samples.empty()) return 0;
  const auto at = static_cast<std::size_t>(p * static_cast<double>(samples.size() - 1));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(at), samples.end());
  return samples[at];
}

struct Variant {
  std::string name;
  std::vector<std::unique_ptr<lockon::test::RedisServer>> servers;
  std::unique_ptr<lockon::Redlock> lock;
  std::vector<double> acquire_us;
  std::vector<double> unlock_us;
};

std::unique_ptr<Variant> make_variant(std::string name) {
  auto v = std::make_unique<Variant>();
  v->name = std::move(name);
  std::vector<std::string> urls;
  for (int i = 0; i < 5; ++i) {
    v->servers.push_back(std::make_unique<lockon::test::RedisServer>());
    urls.push_back(v->servers.back()->url());
  }
  v->lock = std::make_unique<lockon::Redlock>(urls, "bench:redlock-paused-" + v->name, lockon::LockOptions{},
                                              lockon::RedlockOptions{.per_node_timeout = std::chrono::milliseconds(50)});
  return v;
}

void BM_RedlockPausedMinority(benchmark::State& state) {
  auto all_up = make_variant("all_up");
  auto paused = make_variant("paused");
  // Warm both (connections pooled, scripts loaded), then freeze two nodes.
  for (auto* v : {all_up.get(), paused.get()}) {
    for (int i = 0; i < 20; ++i) {
      if (!v->lock->try_lock()) state.SkipWithError("redlock unexpectedly busy");
      v->lock->unlock();
    }
  }
  paused->servers[1]->pause();
  paused->servers[3]->pause();
  constexpr int kRounds = 20;
  constexpr int kCycles = 25;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      for (auto* v : {all_up.get(), paused.get()}) {
        for (int i = 0; i < kCycles; ++i) {
          const auto start = Clock::now();
          if (!v->lock->try_lock()) state.SkipWithError("redlock unexpectedly busy");
          const auto acquired = Clock::now();
          v->lock->unlock();
          const auto released = Clock::now();
          v->acquire_us.push_back(std::chrono::duration<double, std::micro>(acquired - start).count());
          v->unlock_us.push_back(std::chrono::duration<double, std::micro>(released - acquired).count());
        }
      }
    }
  }
  paused->servers[1]->resume();
  paused->servers[3]->resume();
  for (auto* v : {all_up.get(), paused.get()}) {
    state.counters["acquire_p50_us_" + v->name] = percentile_us(v->acquire_us, 0.5);
    state.counters["acquire_p99_us_" + v->name] = percentile_us(v->acquire_us, 0.99);
    state.counters["unlock_p50_us_" + v->name] = percentile_us(v->unlock_us, 0.5);
    state.counters["unlock_p99_us_" + v->name] = percentile_us(v->unlock_us, 0.99);
  }
  state.counters["ratio_acquire_p50"] =
      state.counters["acquire_p50_us_paused"] / state.counters["acquire_p50_us_all_up"];
  state.counters["ratio_unlock_p50"] = state.counters["unlock_p50_us_paused"] / state.counters["unlock_p50_us_all_up"];
}

BENCHMARK(BM_RedlockPausedMinority)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string subject = "BM_RedlockPausedMinority";
  register_ratio({.label = "Redlock N=5, 2 paused: acquire p50 / all-up acquire p50", .subject = subject,
                  .metric = "ratio_acquire_p50", .target = 2.0, .higher_is_better = false});
  register_ratio({.label = "Redlock N=5, 2 paused: unlock p50 / all-up unlock p50", .subject = subject,
                  .metric = "ratio_unlock_p50", .target = 2.0, .higher_is_better = false});
  return true;
}();

}  // namespace
