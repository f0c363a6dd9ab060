// MultiLock's uncontended cycle against the raw two-round-trip floor, in
// alternating blocks inside one measurement (see bench_alternating.cpp for
// why): MultiLock over 1 key and over 2 keys, lock_on_each over 2
// arguments, and the plain Lock for reference. Free keys on one server are
// taken by one script (one round trip for N keys, then N release round
// trips); "ordered2"/"ordered4" force the ordered path (each key's Lock on
// one of two Clients of the same server, which makes the single script
// ineligible) beside "multi2"/"multi4" (the script), same run, so the
// script's gain is measured against the path it replaces.
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
  lockon::MultiLock four(client, {"bench:multi:d", "bench:multi:c", "bench:multi:b2", "bench:multi:a2"});
  // Baseline: the ordered path. Locks alternate between two Clients of the
  // same server (so one script may not serve them); the cost per key is the
  // same as with one Client.
  const lockon::Client second(url);
  int made = 0;
  const lockon::LockFactory two_clients = [&](std::string key,
                                              lockon::LockOptions options) -> std::unique_ptr<lockon::DistributedLock> {
    return std::make_unique<lockon::Lock>(made++ % 2 == 0 ? client : second, std::move(key), std::move(options));
  };
  lockon::MultiLock ordered2({"bench:multi:ob", "bench:multi:oa"}, {}, two_clients);
  lockon::MultiLock ordered4({"bench:multi:od", "bench:multi:oc", "bench:multi:ob2", "bench:multi:oa2"}, {},
                             two_clients);
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
      {"ordered2",
       [&] {
         if (!ordered2.try_lock()) throw std::runtime_error("multi lock (2 keys, ordered) busy");
         ordered2.unlock();
       }},
      {"multi4",
       [&] {
         if (!four.try_lock()) throw std::runtime_error("multi lock (4 keys) busy");
         four.unlock();
       }},
      {"ordered4",
       [&] {
         if (!ordered4.try_lock()) throw std::runtime_error("multi lock (4 keys, ordered) busy");
         ordered4.unlock();
       }},
  };
  lockon::bench::run_alternating_blocks(state, variants, kRounds, kBlock);
}

BENCHMARK(BM_MultiLockAlternating)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string subject = "BM_MultiLockAlternating";
  register_ratio({.label = "alternating blocks: MultiLock (1 key) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_multi1", .target = 0.90});
  // One script for both keys, then 2 releases: 3 round trips against the
  // floor's 2 (the ordered path: 4).
  register_ratio({.label = "alternating blocks: MultiLock (2 keys, one script) / raw floor (cycles/s)",
                  .subject = subject, .metric = "ratio_multi2", .target = 0.40});
  register_ratio({.label = "alternating blocks: MultiLock (2 keys, ordered path) / raw floor (cycles/s)",
                  .subject = subject, .metric = "ratio_ordered2", .target = 0.40});
  register_ratio({.label = "alternating blocks: MultiLock (4 keys, one script) / raw floor (cycles/s)",
                  .subject = subject, .metric = "ratio_multi4", .target = 0.25});
  register_ratio({.label = "alternating blocks: MultiLock (4 keys, ordered path) / raw floor (cycles/s)",
                  .subject = subject, .metric = "ratio_ordered4", .target = 0.20});
  register_ratio({.label = "alternating blocks: lock_on_each (2 args) / raw floor (cycles/s)", .subject = subject,
                  .metric = "ratio_lock_on_each2", .target = 0.40});
  return true;
}();

}  // namespace
