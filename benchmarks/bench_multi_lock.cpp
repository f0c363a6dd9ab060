// MultiLock's uncontended cycle against the raw two-round-trip floor, in
// alternating blocks inside one measurement (see bench_alternating.cpp for
// why): MultiLock over 1 key and over 2 keys, lock_on_each over 2
// arguments, and the plain Lock for reference. MultiLock takes its keys one
// by one (ordered acquisition), so N keys cost N acquire + N release round
// trips: the expected ratio for 2 keys is about half the floor's rate.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "lockon/lockon.hpp"

namespace {

constexpr int kBlock = 200;
constexpr int kRounds = 30;

void BM_MultiLockAlternating(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  lockon::bench::RawFloor floor(url, "bench:multi:floor");

  const lockon::Client client(url);
  lockon::Lock lock(client, "bench:multi:lock");
  lockon::MultiLock one(client, {"bench:multi:one"});
  lockon::MultiLock two(client, {"bench:multi:b", "bench:multi:a"});
  const lockon::RedisLocker locker(client, {.key_prefix = "bench-multi"});
  const auto transfer = locker.lock_on_each<0, 1>("bench::transfer", [](const std::string&, const std::string&) {});
  const std::string from = "account-1";
  const std::string to = "account-2";

  std::vector<lockon::bench::CycleVariant> variants{
      {"floor", [&] { floor.cycle(); }},
      {"lock",
       [&] {
         if (!lock.try_lock()) throw std::runtime_error("lock busy");
         lock.unlock();
       }},
      {"multi1",
       [&] {
         if (!one.try_lock()) throw std::runtime_error("multi lock (1 key) busy");
         one.unlock();
       }},
      {"multi2",
       [&] {
         if (!two.try_lock()) throw std::runtime_error("multi lock (2 keys) busy");
         two.unlock();
       }},
      {"lock_on_each2", [&] { transfer(from, to); }},
  };
  lockon::bench::run_alternating_blocks(state, variants, kRounds, kBlock);
}

BENCHMARK(BM_MultiLockAlternating)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string subject = "BM_MultiLockAlternating";
  register_ratio({.label = "alternating blocks: MultiLock (1 key) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_multi1", .target = 0.90});
  // Ordered acquisition: 4 round trips against the floor's 2, so ~0.5 at best.
  register_ratio({.label = "alternating blocks: MultiLock (2 keys) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_multi2", .target = 0.40});
  register_ratio({.label = "alternating blocks: lock_on_each (2 args) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_on_each2", .target = 0.40});
  return true;
}();

}  // namespace
