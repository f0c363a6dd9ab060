// Contention: hand-off latency and many contenders on one key, lockon's
// notification-based FIFO waiting against a raw hiredis spin loop measured
// in the same run.
//
// Hand-off latency = from the start of the holder's release to the already
// waiting contender's acquire returning. Contenders run critical sections of
// GET + SET on a counter for a fixed time; we report critical sections per
// second, each acquire's wait (p50/p99/max), how often the releasing thread
// took the lock again right away, and Redis commands per critical section
// (INFO commandstats deltas, so polling clients show their cost).
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "lockon/lock.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
constexpr auto kContentionRun = 1500ms;

// A raw blocking hiredis connection (the baseline's only tool).
class Raw {
 public:
  explicit Raw(const std::string& url) {
    const auto options = lockon::ConnectionOptions::from_url(url);
    context_.reset(redisConnect(options.host.c_str(), options.port));
    if (!context_ || context_->err) throw std::runtime_error("cannot connect to " + url);
  }
  struct Free {
    void operator()(redisReply* r) const { freeReplyObject(r); }
  };
  using Reply = std::unique_ptr<redisReply, Free>;
  Reply run(std::initializer_list<std::string> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply reply(static_cast<redisReply*>(
        redisCommandArgv(context_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!reply) throw std::runtime_error("raw command failed");
    return reply;
  }
  std::string load(const char* script) { return run({"SCRIPT", "LOAD", script})->str; }

 private:
  std::unique_ptr<redisContext, decltype(&redisFree)> context_{nullptr, &redisFree};
};

long long total_calls(Raw& raw) {
  const auto info = raw.run({"INFO", "commandstats"});
  const std::string text(info->str, info->len);
  long long total = 0;
  for (std::size_t at = text.find("calls="); at != std::string::npos; at = text.find("calls=", at + 6))
    total += std::stoll(text.substr(at + 6));
  return total;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1));
  return values[index];
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// ---------------------------------------------------------------- hand-off

// One holder, one contender already waiting; `Acquire`/`Release` abstract
// the lock kind. Returns hand-off latencies in µs.
template <class Setup>
std::vector<double> measure_handoff(int rounds, Setup&& make_pair) {
  auto [holder_lock, holder_unlock, waiter_acquire, waiter_release] = make_pair();
  std::vector<double> latencies;
  latencies.reserve(static_cast<std::size_t>(rounds));
  for (int round = 0; round < rounds; ++round) {
    holder_lock();
    std::atomic<bool> waiting{false};
    Clock::time_point acquired_at;
    std::thread waiter([&] {
      waiting = true;
      waiter_acquire();
      acquired_at = Clock::now();
      waiter_release();
    });
    while (!waiting) std::this_thread::yield();
    std::this_thread::sleep_for(3ms);  // the contender is now queued and asleep
    const auto release_started = Clock::now();
    holder_unlock();
    waiter.join();
    latencies.push_back(micros(acquired_at - release_started));
  }
  return latencies;
}

void report_latencies(benchmark::State& state, const std::vector<double>& latencies) {
  state.counters["p50_us"] = percentile(latencies, 0.50);
  state.counters["p99_us"] = percentile(latencies, 0.99);
  state.counters["max_us"] = percentile(latencies, 1.0);
}

void BM_HandoffRawSpin(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  std::vector<double> latencies;
  for (auto _ : state) {
    latencies = measure_handoff(200, [&] {
      auto holder = std::make_shared<Raw>(url);
      auto waiter = std::make_shared<Raw>(url);
      auto sha = std::make_shared<std::string>(holder->load(kCompareAndDelete));
      return std::tuple{
          [=] { holder->run({"SET", "bench:handoff-raw", "holder", "NX", "PX", "30000"}); },
          [=] { holder->run({"EVALSHA", *sha, "1", "bench:handoff-raw", "holder"}); },
          [=] {
            while (waiter->run({"SET", "bench:handoff-raw", "waiter", "NX", "PX", "30000"})->type == REDIS_REPLY_NIL) {
            }
          },
          [=] { waiter->run({"EVALSHA", *sha, "1", "bench:handoff-raw", "waiter"}); }};
    });
  }
  report_latencies(state, latencies);
}

void BM_HandoffLockon(benchmark::State& state) {
  const lockon::Client client(lockon::bench::server_url());
  std::vector<double> latencies;
  for (auto _ : state) {
    latencies = measure_handoff(200, [&] {
      auto holder = std::make_shared<lockon::Lock>(client, "bench:handoff");
      auto waiter = std::make_shared<lockon::Lock>(client, "bench:handoff");
      return std::tuple{[=] { holder->lock(); }, [=] { holder->unlock(); },
                        [=] {
                          if (!waiter->try_lock_for(10s)) throw std::runtime_error("hand-off waiter timed out");
                        },
                        [=] { waiter->unlock(); }};
    });
  }
  report_latencies(state, latencies);
}

// -------------------------------------------------------------- contenders

struct ContentionResult {
  long long critical_sections = 0;
  std::vector<double> waits_us;
  double retake_fraction = 0;
  double calls_per_cs = 0;
  double seconds = 0;
};

// Runs `threads` contenders for kContentionRun. `Contender` is constructed
// per thread with (url, key) and offers acquire() / release().
template <class Contender>
ContentionResult run_contention(int threads, const std::string& tag) {
  const std::string url = lockon::bench::server_url();
  const std::string key = "bench:contended:" + tag;
  const std::string counter = key + ":counter";
  Raw admin(url);
  admin.run({"DEL", key, counter});
  std::mutex order_mutex;
  std::vector<int> order;  // which thread ran each critical section
  std::vector<std::vector<double>> waits(static_cast<std::size_t>(threads));
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  const long long calls_before = total_calls(admin);
  const auto started = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Contender contender(url, key);
      Raw data(url);
      ++ready;
      while (!stop) {
        const auto t0 = Clock::now();
        if (!contender.acquire()) break;
        waits[static_cast<std::size_t>(t)].push_back(micros(Clock::now() - t0));
        const auto value = data.run({"GET", counter});
        const long long next = (value->type == REDIS_REPLY_STRING ? std::stoll(value->str) : 0) + 1;
        data.run({"SET", counter, std::to_string(next)});
        {
          std::lock_guard lock(order_mutex);
          order.push_back(t);
        }
        contender.release();
      }
    });
  }
  std::this_thread::sleep_for(kContentionRun);
  stop = true;
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const long long calls = total_calls(admin) - calls_before - 1;  // minus our own INFO

  ContentionResult result;
  result.seconds = seconds;
  result.critical_sections = static_cast<long long>(order.size());
  const auto stored = admin.run({"GET", counter});
  if (stored->type != REDIS_REPLY_STRING || std::stoll(stored->str) != result.critical_sections)
    throw std::runtime_error("counter mismatch: mutual exclusion violated");
  for (auto& w : waits) result.waits_us.insert(result.waits_us.end(), w.begin(), w.end());
  long long retakes = 0;
  for (std::size_t i = 1; i < order.size(); ++i) retakes += order[i] == order[i - 1] ? 1 : 0;
  result.retake_fraction = order.size() > 1 ? static_cast<double>(retakes) / static_cast<double>(order.size() - 1) : 0;
  result.calls_per_cs = result.critical_sections > 0 ? static_cast<double>(calls) / static_cast<double>(result.critical_sections) : 0;
  return result;
}

struct RawSpinContender {
  RawSpinContender(const std::string& url, std::string key)
      : raw(url), key_(std::move(key)), token(std::to_string(reinterpret_cast<std::uintptr_t>(this))),
        sha(raw.load(kCompareAndDelete)) {}
  bool acquire() {
    while (raw.run({"SET", key_, token, "NX", "PX", "30000"})->type == REDIS_REPLY_NIL) {
    }
    return true;
  }
  void release() { raw.run({"EVALSHA", sha, "1", key_, token}); }
  Raw raw;
  std::string key_;
  std::string token;
  std::string sha;
};

struct LockonContender {
  LockonContender(const std::string& url, const std::string& key)
      : client(url, lockon::PoolOptions{.size = 2, .wait_timeout = 2000ms}), lock(client, key) {}
  bool acquire() { return lock.try_lock_for(10s); }
  void release() { lock.unlock(); }
  lockon::Client client;
  lockon::Lock lock;
};

template <class Contender>
void contention_case(benchmark::State& state, const char* tag) {
  ContentionResult result;
  for (auto _ : state) result = run_contention<Contender>(static_cast<int>(state.range(0)), tag);
  const double cs_per_s = static_cast<double>(result.critical_sections) / result.seconds;
  state.counters["cs_per_s"] = cs_per_s;
  state.counters["cycle_us"] = cs_per_s > 0 ? 1e6 / cs_per_s : 0;
  state.counters["wait_p50_us"] = percentile(result.waits_us, 0.50);
  state.counters["wait_p99_us"] = percentile(result.waits_us, 0.99);
  state.counters["wait_max_us"] = percentile(result.waits_us, 1.0);
  state.counters["wait_max_over_p50"] =
      percentile(result.waits_us, 1.0) / std::max(1.0, percentile(result.waits_us, 0.50));
  state.counters["retake_pct"] = 100.0 * result.retake_fraction;
  state.counters["calls_per_cs"] = result.calls_per_cs;
}

void BM_ContentionRawSpin(benchmark::State& state) { contention_case<RawSpinContender>(state, "raw"); }
void BM_ContentionLockon(benchmark::State& state) { contention_case<LockonContender>(state, "lockon"); }

#define LOCKON_ONE_SHOT(fn) BENCHMARK(fn)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true)
LOCKON_ONE_SHOT(BM_HandoffRawSpin);
LOCKON_ONE_SHOT(BM_HandoffLockon);
LOCKON_ONE_SHOT(BM_ContentionRawSpin)->Arg(1)->Arg(4)->Arg(16);
LOCKON_ONE_SHOT(BM_ContentionLockon)->Arg(1)->Arg(4)->Arg(16);

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "hand-off p50: lockon / raw spin retry", .subject = "BM_HandoffLockon",
                  .baseline = "BM_HandoffRawSpin", .metric = "p50_us", .target = 2.0, .higher_is_better = false});
  register_ratio({.label = "hand-off p99 (us)", .subject = "BM_HandoffLockon", .metric = "p99_us", .target = 3000,
                  .higher_is_better = false});
  for (const char* n : {"4", "16"}) {
    const std::string lockon = std::string("BM_ContentionLockon/") + n;
    const std::string raw = std::string("BM_ContentionRawSpin/") + n;
    const std::string ways = std::string(n) + "-way: ";
    register_ratio({.label = ways + "critical sections/s, lockon / raw spin", .subject = lockon, .baseline = raw,
                    .metric = "cs_per_s", .target = 0.9});
    register_ratio({.label = ways + "wait p50 / (4 x uncontended cycle)", .subject = lockon,
                    .baseline = "BM_ContentionLockon/1", .metric = "wait_p50_us", .target = 1.0,
                    .higher_is_better = false, .baseline_metric = "cycle_us", .baseline_scale = 4.0});
    register_ratio({.label = ways + "wait max / wait p50", .subject = lockon, .metric = "wait_max_over_p50",
                    .target = 10.0, .higher_is_better = false});
    register_ratio({.label = ways + "same holder re-takes (%)", .subject = lockon, .metric = "retake_pct",
                    .target = 30.0, .higher_is_better = false});
    register_ratio({.label = ways + "Redis calls per critical section / uncontended", .subject = lockon,
                    .baseline = "BM_ContentionLockon/1", .metric = "calls_per_cs", .target = 2.0,
                    .higher_is_better = false});
  }
  return true;
}();

}  // namespace
