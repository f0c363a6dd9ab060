// The uncontended cycle: the raw two-round-trip floor (SET NX PX + EVALSHA
// compare-and-delete on one hiredis context) against the same cycle through
// lockon's client layer, the Lock, and the Lock with fencing.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bench_support.hpp"
#include "client/client_impl.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/lock.hpp"
#include "client/script.hpp"

namespace {

using lockon::bench::RatioSpec;

constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

struct RawContext {
  std::unique_ptr<redisContext, decltype(&redisFree)> context{nullptr, &redisFree};
  explicit RawContext(const std::string& url) {
    const auto options = lockon::ConnectionOptions::from_url(url);
    context.reset(redisConnect(options.host.c_str(), options.port));
    if (!context || context->err) throw std::runtime_error("cannot connect to " + url);
  }
  redisReply* run(std::initializer_list<std::string_view> args) {
    std::array<const char*, 8> argv{};
    std::array<std::size_t, 8> lens{};
    std::size_t i = 0;
    for (auto a : args) {
      argv[i] = a.data();
      lens[i++] = a.size();
    }
    auto* reply = static_cast<redisReply*>(redisCommandArgv(context.get(), static_cast<int>(i), argv.data(), lens.data()));
    if (reply == nullptr) throw std::runtime_error("raw command failed");
    return reply;
  }
};

void BM_RawFloor(benchmark::State& state) {
  RawContext raw(lockon::bench::server_url());
  redisReply* load = raw.run({"SCRIPT", "LOAD", kCompareAndDelete});
  const std::string sha(load->str, load->len);
  freeReplyObject(load);
  const std::string token = "0123456789abcdef0123456789abcdef";
  for (auto _ : state) {
    freeReplyObject(raw.run({"SET", "bench:floor", token, "NX", "PX", "30000"}));
    redisReply* released = raw.run({"EVALSHA", sha, "1", "bench:floor", token});
    if (released->integer != 1) state.SkipWithError("floor release failed");
    freeReplyObject(released);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ClientLayerCycle(benchmark::State& state) {
  lockon::Client client(lockon::bench::server_url());
  static const lockon::detail::Script compare_and_delete(kCompareAndDelete);
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::array<std::string_view, 6> set{"SET", "bench:client", token, "NX", "PX", "30000"};
  const std::array<std::string_view, 1> keys{"bench:client"};
  const std::array<std::string_view, 1> args{token};
  for (auto _ : state) {
    auto connection = client.impl()->pool().borrow();
    connection->command(set, "SET");
    auto reply = lockon::detail::eval(*connection, compare_and_delete, keys, args, "release");
    if (reply->integer != 1) state.SkipWithError("client-layer release failed");
  }
  state.SetItemsProcessed(state.iterations());
}

void lock_cycle(benchmark::State& state, lockon::LockOptions options, const char* name) {
  lockon::Client client(lockon::bench::server_url());
  lockon::Lock lock(client, name, std::move(options));
  for (auto _ : state) {
    if (!lock.try_lock()) state.SkipWithError("lock unexpectedly busy");
    lock.unlock();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_LockCycle(benchmark::State& state) { lock_cycle(state, {}, "bench:lock"); }
void BM_LockCycleFenced(benchmark::State& state) { lock_cycle(state, {.fencing = true}, "bench:lock-fenced"); }

#define LOCKON_CYCLE_BENCH(fn) BENCHMARK(fn)->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true)
LOCKON_CYCLE_BENCH(BM_RawFloor);
LOCKON_CYCLE_BENCH(BM_ClientLayerCycle);
LOCKON_CYCLE_BENCH(BM_LockCycle);
LOCKON_CYCLE_BENCH(BM_LockCycleFenced);

// Measured one after another, these drift with the machine's speed (up to
// 3x within an hour here); the checks with targets are the alternating-block
// ones in bench_alternating.cpp. Reported for context.
const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "separate runs: client layer cycle / raw floor (cycles/s)", .subject = "BM_ClientLayerCycle",
                  .baseline = "BM_RawFloor", .metric = "items_per_second", .informational = true});
  register_ratio({.label = "separate runs: Lock cycle / raw floor (cycles/s)", .subject = "BM_LockCycle",
                  .baseline = "BM_RawFloor", .metric = "items_per_second", .informational = true});
  register_ratio({.label = "separate runs: Lock cycle with fencing / raw floor (cycles/s)",
                  .subject = "BM_LockCycleFenced", .baseline = "BM_RawFloor", .metric = "items_per_second",
                  .informational = true});
  return true;
}();

}  // namespace
