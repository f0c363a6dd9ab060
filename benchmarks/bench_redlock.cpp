// The uncontended Redlock cycle (acquire + release) over N = 1, 3 and 5
// independent servers, measured in the same run. The nodes are contacted in
// parallel (one fan-out per phase), so N = 3 and N = 5 should cost little
// more than N = 1. Target: cycle time(N) <= 1.3 x cycle time(1).
//
// Two settings (second argument, one_way_us):
//  - 0: the servers are reached directly. They share this 2-core machine
//    with the client, so every extra node adds CPU work that competes for
//    the same cores: the raw parallel floor below grows ~2-3x from N = 1 to
//    N = 5 by itself. Reported, and lockon is checked against that floor.
//  - 250: every node sits behind a FaultProxy holding each direction for
//    250 us (a 0.5 ms round trip, like servers on separate hosts in one
//    data centre). The network dominates, as in production; this is where
//    the N-scaling target is checked. BM_RawSequentialFloor shows what a
//    one-node-after-another client would pay there.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_support.hpp"
#include "lockon/lock.hpp"
#include "lockon/options.hpp"
#include "lockon/redlock.hpp"

namespace {

using lockon::bench::RatioSpec;

constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

using Context = std::unique_ptr<redisContext, decltype(&redisFree)>;

Context connect(const std::string& url) {
  const auto options = lockon::ConnectionOptions::from_url(url);
  Context context(redisConnect(options.host.c_str(), options.port), &redisFree);
  if (!context || context->err) throw std::runtime_error("cannot connect to " + url);
  return context;
}

void append(redisContext* context, std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisAppendCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lens.data());
}

// Flushes every context, then reads one reply from each; returns how many
// replies satisfied `ok`.
template <class Ok>
std::size_t phase(std::vector<Context>& contexts, Ok&& ok) {
  for (auto& context : contexts) {
    int done = 0;
    while (!done)
      if (redisBufferWrite(context.get(), &done) != REDIS_OK) throw std::runtime_error("write failed");
  }
  std::size_t good = 0;
  for (auto& context : contexts) {
    void* reply = nullptr;
    if (redisGetReply(context.get(), &reply) != REDIS_OK) throw std::runtime_error("read failed");
    if (ok(*static_cast<redisReply*>(reply))) ++good;
    freeReplyObject(reply);
  }
  return good;
}

std::vector<std::string> urls_for(const benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::chrono::microseconds one_way(state.range(1));
  return one_way.count() == 0 ? lockon::bench::server_urls(n) : lockon::bench::delayed_server_urls(n, one_way);
}

std::vector<Context> connect_all(const std::vector<std::string>& urls, std::string& sha) {
  std::vector<Context> contexts;
  for (const auto& url : urls) {
    contexts.push_back(connect(url));
    auto* load = static_cast<redisReply*>(redisCommand(contexts.back().get(), "SCRIPT LOAD %s", kCompareAndDelete));
    sha.assign(load->str, load->len);
    freeReplyObject(load);
  }
  return contexts;
}

const std::string kToken = "0123456789abcdef0123456789abcdef";

// Both phases to all N nodes at once: write to every node, then read every
// reply. What the machine can do at best.
// One acquire + release on all nodes; false if a node did not answer OK.
bool raw_parallel_cycle(std::vector<Context>& contexts, const std::string& sha) {
  for (auto& c : contexts) append(c.get(), {"SET", "bench:raw-parallel", kToken, "NX", "PX", "30000"});
  const bool acquired =
      phase(contexts, [](const redisReply& r) { return r.type == REDIS_REPLY_STATUS; }) == contexts.size();
  for (auto& c : contexts) append(c.get(), {"EVALSHA", sha, "1", "bench:raw-parallel", kToken});
  const bool released = phase(contexts, [](const redisReply& r) {
                          return r.type == REDIS_REPLY_INTEGER && r.integer == 1;
                        }) == contexts.size();
  return acquired && released;
}

void BM_RawParallelFloor(benchmark::State& state) {
  std::string sha;
  std::vector<Context> contexts = connect_all(urls_for(state), sha);
  for (auto _ : state)
    if (!raw_parallel_cycle(contexts, sha)) state.SkipWithError("raw cycle failed");
  state.SetItemsProcessed(state.iterations());
}

// Servers on this machine: the floor and Redlock in alternating blocks of
// cycles inside one measurement (immune to the machine's speed drift).
void BM_RedlockVsFloorAlternating(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<std::string> urls = lockon::bench::server_urls(n);
  std::string sha;
  std::vector<Context> contexts = connect_all(urls, sha);
  lockon::Redlock lock(urls, "bench:redlock-alt");
  constexpr int kBlocks = 20;
  constexpr int kCycles = 100;
  double floor_seconds = 0;
  double redlock_seconds = 0;
  for (auto _ : state) {
    floor_seconds = 0;
    redlock_seconds = 0;
    for (int block = 0; block < kBlocks; ++block) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCycles; ++i)
        if (!raw_parallel_cycle(contexts, sha)) state.SkipWithError("raw cycle failed");
      floor_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCycles; ++i) {
        if (!lock.try_lock()) state.SkipWithError("redlock unexpectedly busy");
        lock.unlock();
      }
      redlock_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  state.counters["floor_us"] = 1e6 * floor_seconds / (kBlocks * kCycles);
  state.counters["redlock_us"] = 1e6 * redlock_seconds / (kBlocks * kCycles);
}

// The same cycle, one node after another (what a sequential Redlock client
// such as redis-plus-plus's does).
void BM_RawSequentialFloor(benchmark::State& state) {
  std::string sha;
  std::vector<Context> contexts = connect_all(urls_for(state), sha);
  for (auto _ : state) {
    for (auto& c : contexts) {
      auto* set = static_cast<redisReply*>(
          redisCommand(c.get(), "SET bench:raw-sequential %s NX PX 30000", kToken.c_str()));
      if (set == nullptr || set->type != REDIS_REPLY_STATUS) state.SkipWithError("raw acquire failed");
      freeReplyObject(set);
    }
    for (auto& c : contexts) {
      auto* del = static_cast<redisReply*>(
          redisCommand(c.get(), "EVALSHA %s 1 bench:raw-sequential %s", sha.c_str(), kToken.c_str()));
      if (del == nullptr || del->type != REDIS_REPLY_INTEGER || del->integer != 1) state.SkipWithError("raw release failed");
      freeReplyObject(del);
    }
  }
  state.SetItemsProcessed(state.iterations());
}

void redlock_cycle(benchmark::State& state, bool fencing, bool auto_renew = true) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<std::string> urls = urls_for(state);
  lockon::Redlock lock(urls, fencing ? "bench:redlock-fenced" : "bench:redlock",
                       {.auto_renew = auto_renew, .fencing = fencing});
  for (auto _ : state) {
    if (!lock.try_lock()) state.SkipWithError("redlock unexpectedly busy");
    lock.unlock();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = static_cast<double>(n);
}

void BM_RedlockCycle(benchmark::State& state) { redlock_cycle(state, false); }
void BM_RedlockCycleFenced(benchmark::State& state) { redlock_cycle(state, true); }
// Without watchdog registration: isolates its cost (a wake-up of lockon's
// renewal thread per acquisition, competing with the servers for the cores).
void BM_RedlockCycleNoRenew(benchmark::State& state) { redlock_cycle(state, false, false); }

// Behind the relay, Redlock over 1, 3 and 5 nodes (plain and fenced) in
// alternating blocks of cycles inside one measurement: the VM's speed drift
// and its slow timer wake-ups (the relay sleeps between chunks) hit every
// N alike, so the N-scaling ratios compare like with like.
void BM_RedlockScalingAlternating(benchmark::State& state) {
  const std::chrono::microseconds one_way(state.range(0));
  struct Variant {
    std::string name;
    std::unique_ptr<lockon::Redlock> lock;
    double seconds = 0;
  };
  std::vector<Variant> variants;
  for (const bool fenced : {false, true}) {
    for (const std::size_t n : {1, 3, 5}) {
      const std::string name = std::string(fenced ? "fenced_" : "") + "n" + std::to_string(n);
      variants.push_back({name, std::make_unique<lockon::Redlock>(lockon::bench::delayed_server_urls(n, one_way),
                                                                  "bench:redlock-scaling-" + name,
                                                                  lockon::LockOptions{.fencing = fenced})});
    }
  }
  constexpr int kRounds = 12;
  constexpr int kCycles = 20;
  for (auto _ : state) {
    for (auto& v : variants) v.seconds = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (auto& v : variants) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kCycles; ++i) {
          if (!v.lock->try_lock()) state.SkipWithError("redlock unexpectedly busy");
          v.lock->unlock();
        }
        v.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
  }
  for (const auto& v : variants) state.counters["us_" + v.name] = 1e6 * v.seconds / (kRounds * kCycles);
}

// The single-instance Lock through the same relay: Redlock N = 1 against it
// shows the quorum machinery's own cost.
void BM_SingleLockCycle(benchmark::State& state) {
  const lockon::Client client(urls_for(state).front());
  lockon::Lock lock(client, "bench:single");
  for (auto _ : state) {
    if (!lock.try_lock()) state.SkipWithError("lock unexpectedly busy");
    lock.unlock();
  }
  state.SetItemsProcessed(state.iterations());
}

void nodes_and_delays(benchmark::internal::Benchmark* b, const std::vector<std::int64_t>& one_way_us) {
  b->ArgNames({"nodes", "one_way_us"})->ArgsProduct({{1, 3, 5}, one_way_us});
  b->UseRealTime()->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true);
}
void nodes_and_delay(benchmark::internal::Benchmark* b) { nodes_and_delays(b, {0, 250}); }
void nodes_on_this_machine(benchmark::internal::Benchmark* b) { nodes_and_delays(b, {0}); }

BENCHMARK(BM_RawParallelFloor)->Apply(nodes_and_delay);
BENCHMARK(BM_RawSequentialFloor)->Apply(nodes_and_delay);
BENCHMARK(BM_RedlockVsFloorAlternating)->ArgName("nodes")->Arg(1)->Arg(3)->Arg(5)->Iterations(1)->Repetitions(3)
    ->UseRealTime()->ReportAggregatesOnly(true);
BENCHMARK(BM_RedlockCycle)->Apply(nodes_and_delay);
// Behind the relay these two are measured by BM_RedlockScalingAlternating.
BENCHMARK(BM_RedlockCycleNoRenew)->Apply(nodes_on_this_machine);
BENCHMARK(BM_RedlockCycleFenced)->Apply(nodes_on_this_machine);
BENCHMARK(BM_RedlockScalingAlternating)->ArgName("one_way_us")->Arg(250)->Iterations(1)->Repetitions(3)->UseRealTime()
    ->ReportAggregatesOnly(true);
BENCHMARK(BM_SingleLockCycle)->ArgNames({"nodes", "one_way_us"})->Args({1, 0})->Args({1, 250})->UseRealTime()
    ->MinTime(0.5)->Repetitions(5)->ReportAggregatesOnly(true);

std::string name(const char* bench, int nodes, int one_way_us) {
  return std::string(bench) + "/nodes:" + std::to_string(nodes) + "/one_way_us:" + std::to_string(one_way_us);
}

RatioSpec time_ratio(std::string label, std::string subject, std::string baseline, bool informational = false) {
  return {.label = std::move(label), .subject = std::move(subject), .baseline = std::move(baseline),
          .metric = "real_time", .target = 1.3, .higher_is_better = false, .informational = informational};
}

const bool registered = [] {
  using lockon::bench::register_ratio;
  for (const int n : {3, 5}) {
    const std::string ns = std::to_string(n);
    // The target, where the network dominates (servers on separate hosts),
    // measured in alternating blocks.
    const std::string scaling = "BM_RedlockScalingAlternating/one_way_us:250";
    register_ratio({.label = "Redlock cycle N=" + ns + " / N=1, 0.5 ms network", .subject = scaling,
                    .baseline = scaling, .metric = "us_n" + ns, .target = 1.3, .higher_is_better = false,
                    .baseline_metric = "us_n1"});
    register_ratio({.label = "Redlock fenced cycle N=" + ns + " / N=1, 0.5 ms network", .subject = scaling,
                    .baseline = scaling, .metric = "us_fenced_n" + ns, .target = 1.3, .higher_is_better = false,
                    .baseline_metric = "us_fenced_n1"});
    register_ratio(time_ratio("  separate runs: Redlock cycle N=" + ns + " / N=1, 0.5 ms network",
                              name("BM_RedlockCycle", n, 250), name("BM_RedlockCycle", 1, 250), true));
    register_ratio(time_ratio("  one node after another (raw) N=" + ns + " / N=1, 0.5 ms network",
                              name("BM_RawSequentialFloor", n, 250), name("BM_RawSequentialFloor", 1, 250), true));
    // Co-located servers: CPU-bound on this machine; lockon against the floor.
    register_ratio(time_ratio("Redlock cycle N=" + ns + " / N=1, servers on this machine", name("BM_RedlockCycle", n, 0),
                              name("BM_RedlockCycle", 1, 0), true));
    register_ratio(time_ratio("  raw parallel floor N=" + ns + " / N=1, servers on this machine",
                              name("BM_RawParallelFloor", n, 0), name("BM_RawParallelFloor", 1, 0), true));
    const std::string alternating = "BM_RedlockVsFloorAlternating/nodes:" + ns;
    register_ratio({.label = "Redlock cycle / raw parallel floor, N=" + ns + ", servers on this machine",
                    .subject = alternating, .baseline = alternating, .metric = "redlock_us", .target = 1.3,
                    .higher_is_better = false, .baseline_metric = "floor_us"});
  }
  register_ratio(time_ratio("Redlock N=1 / single-instance Lock, 0.5 ms network", name("BM_RedlockCycle", 1, 250),
                            name("BM_SingleLockCycle", 1, 250), true));
  return true;
}();

}  // namespace
