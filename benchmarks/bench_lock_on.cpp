// The uncontended lock_on call cycle: a wrapped no-op function with three
// arguments, all three locked on, through RedisLocker's default policy
// (auto-renewal on) — key derivation, lock object, acquire, call, release —
// against the raw two-round-trip floor (bench_floor.cpp) in the same run.
// The same cycle through a decorate()d function and the default locker.
#include <benchmark/benchmark.h>

#include <string>

#include "bench_support.hpp"
#include "lockon/lockon.hpp"

namespace {

void noop(int account, const std::string& currency, long long amount) {
  benchmark::DoNotOptimize(account);
  benchmark::DoNotOptimize(currency.data());
  benchmark::DoNotOptimize(amount);
}

inline constexpr auto decorated_noop = lockon::decorate<"bench::decorated_noop", 0, 1, 2>(&noop);

void BM_LockOnCycle(benchmark::State& state) {
  const lockon::RedisLocker locker(lockon::bench::server_url(), {.key_prefix = "bench"});
  const auto locked = locker.lock_on<0, 1, 2>("bench::noop", &noop);
  const std::string currency = "EUR";
  for (auto _ : state) locked(42, currency, 1000);
  state.SetItemsProcessed(state.iterations());
}

void BM_LockOnCycleDecorated(benchmark::State& state) {
  lockon::set_default_locker(lockon::RedisLocker(lockon::bench::server_url(), {.key_prefix = "bench"}));
  const std::string currency = "EUR";
  for (auto _ : state) decorated_noop(42, currency, 1000);
  state.SetItemsProcessed(state.iterations());
  lockon::reset_default_locker();
}

BENCHMARK(BM_LockOnCycle)->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_LockOnCycleDecorated)->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true);

// Drift-prone (separate runs); the targets are checked in alternating blocks
// (bench_alternating.cpp). Reported for context.
const bool registered =
    lockon::bench::register_ratio({.label = "separate runs: lock_on cycle (no-op fn, 3 args) / raw floor (cycles/s)",
                                   .subject = "BM_LockOnCycle", .baseline = "BM_RawFloor",
                                   .metric = "items_per_second", .informational = true}) &&
    lockon::bench::register_ratio({.label = "separate runs: decorated lock_on cycle / raw floor (cycles/s)",
                                   .subject = "BM_LockOnCycleDecorated", .baseline = "BM_RawFloor",
                                   .metric = "items_per_second", .informational = true});

}  // namespace
