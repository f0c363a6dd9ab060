// Contention: hand-off latency and many contenders on one key, lockon's
// notification-based FIFO waiting against a raw hiredis spin loop measured
// in the same run.
//
// Hand-off latency = from the start of the holder's release to the already
// waiting contender's acquire returning, on an idle server and on one busy
// with another client's traffic (see BackgroundTraffic for why both).
// Contenders run critical sections of GET + SET on a counter; the raw spin
// baseline and lockon alternate in blocks of 250 ms inside one measurement.
// We report critical sections per second, each acquire's wait
// (p50/p99/max), how often the releasing thread took the lock again right
// away, and Redis commands per critical section (INFO commandstats deltas,
// so polling clients show their cost).
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

// Another client's steady traffic on the server. On this VM an idle
// redis-server's virtual CPU halts, and waking it costs ~300 us (a PING after
// 3 ms of silence takes 8x a PING in a busy loop). A spinning waiter never lets
// the server idle, a sleeping waiter does, so an idle-server comparison
// measures the hypervisor, not the lock. Production servers are rarely idle;
// both variants are measured both ways and the check uses the busy server.
class BackgroundTraffic {
 public:
  explicit BackgroundTraffic(bool enabled) {
    if (!enabled) return;
    thread_ = std::thread([this, raw = std::make_shared<Raw>(lockon::bench::server_url())] {
      while (!stop_) raw->run({"PING"});
    });
  }
  ~BackgroundTraffic() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  BackgroundTraffic(const BackgroundTraffic&) = delete;
  BackgroundTraffic& operator=(const BackgroundTraffic&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

void report_latencies(benchmark::State& state, const std::string& prefix, const std::vector<double>& latencies) {
  state.counters[prefix + "p50_us"] = percentile(latencies, 0.50);
  state.counters[prefix + "p99_us"] = percentile(latencies, 0.99);
  state.counters[prefix + "max_us"] = percentile(latencies, 1.0);
}

// Holder and waiter actions of lockon's hand-off (see measure_handoff).
auto lockon_handoff_pair(const lockon::Client& client, const std::string& key) {
  auto holder = std::make_shared<lockon::Lock>(client, key);
  auto waiter = std::make_shared<lockon::Lock>(client, key);
  return std::tuple{[=] { holder->lock(); }, [=] { holder->unlock(); },
                    [=] {
                      if (!waiter->try_lock_for(10s)) throw std::runtime_error("hand-off waiter timed out");
                    },
                    [=] { waiter->unlock(); }};
}

// The raw spin baseline and lockon alternate in blocks of rounds inside one
// measurement, so the machine's speed drift hits both alike.
constexpr int kHandoffBlocks = 8;
constexpr int kHandoffRoundsPerBlock = 25;

void BM_Handoff(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  const BackgroundTraffic traffic(state.range(0) == 1);
  const lockon::Client client(url);
  auto raw_holder = std::make_shared<Raw>(url);
  auto raw_waiter = std::make_shared<Raw>(url);
  auto sha = std::make_shared<std::string>(raw_holder->load(kCompareAndDelete));
  const auto raw_pair = [&] {
    return std::tuple{
        [=] { raw_holder->run({"SET", "bench:handoff-raw", "holder", "NX", "PX", "30000"}); },
        [=] { raw_holder->run({"EVALSHA", *sha, "1", "bench:handoff-raw", "holder"}); },
        [=] {
          while (raw_waiter->run({"SET", "bench:handoff-raw", "waiter", "NX", "PX", "30000"})->type == REDIS_REPLY_NIL) {
          }
        },
        [=] { raw_waiter->run({"EVALSHA", *sha, "1", "bench:handoff-raw", "waiter"}); }};
  };
  const auto lockon_pair = [&] { return lockon_handoff_pair(client, "bench:handoff"); };
  std::vector<double> raw;
  std::vector<double> lockon;
  for (auto _ : state) {
    raw.clear();
    lockon.clear();
    // Each block's first round is a warm-up after the other kind ran, and
    // is not counted.
    for (int block = 0; block < kHandoffBlocks; ++block) {
      const auto raw_block = measure_handoff(kHandoffRoundsPerBlock + 1, raw_pair);
      raw.insert(raw.end(), raw_block.begin() + 1, raw_block.end());
      const auto lockon_block = measure_handoff(kHandoffRoundsPerBlock + 1, lockon_pair);
      lockon.insert(lockon.end(), lockon_block.begin() + 1, lockon_block.end());
    }
  }
  report_latencies(state, "raw_", raw);
  report_latencies(state, "lockon_", lockon);
}

// lockon alone, for the tail: right after a block of the spin baseline
// (which keeps both cores busy) the alternating measurement's tails show
// the baseline's aftermath as much as lockon's.
void BM_HandoffLockon(benchmark::State& state) {
  const BackgroundTraffic traffic(state.range(0) == 1);
  const lockon::Client client(lockon::bench::server_url());
  std::vector<double> latencies;
  for (auto _ : state) {
    latencies = measure_handoff(400, [&] { return lockon_handoff_pair(client, "bench:handoff-alone"); });
  }
  report_latencies(state, "", latencies);
}

// What the hypervisor charges for waking an idle server: one PING after 3 ms
// of silence (the hand-off benchmark's waiting time) against one PING in a
// busy loop.
void BM_ServerWakeCost(benchmark::State& state) {
  Raw raw(lockon::bench::server_url());
  std::vector<double> idle;
  std::vector<double> busy;
  for (auto _ : state) {
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(3ms);
      auto t0 = Clock::now();
      raw.run({"PING"});
      idle.push_back(micros(Clock::now() - t0));
      t0 = Clock::now();
      raw.run({"PING"});
      busy.push_back(micros(Clock::now() - t0));
    }
  }
  state.counters["idle_ping_p50_us"] = percentile(idle, 0.50);
  state.counters["busy_ping_p50_us"] = percentile(busy, 0.50);
}

// -------------------------------------------------------------- contenders

struct ContentionResult {
  long long critical_sections = 0;
  long long retakes = 0;
  long long calls = 0;
  double seconds = 0;
  std::vector<double> waits_us;

  void merge(const ContentionResult& block) {
    critical_sections += block.critical_sections;
    retakes += block.retakes;
    calls += block.calls;
    seconds += block.seconds;
    waits_us.insert(waits_us.end(), block.waits_us.begin(), block.waits_us.end());
  }
};

// One contender and its data connection, kept across blocks so that every
// block measures warm connections (and lockon's subscription stays up, as
// it does in a process that contends repeatedly).
template <class Contender>
struct Seat {
  Seat(const std::string& url, const std::string& key) : contender(url, key), data(url) {}
  Contender contender;
  Raw data;
};

template <class Contender>
using Seats = std::vector<std::unique_ptr<Seat<Contender>>>;

template <class Contender>
Seats<Contender> make_seats(int threads, const std::string& key) {
  Seats<Contender> seats;
  for (int t = 0; t < threads; ++t)
    seats.push_back(std::make_unique<Seat<Contender>>(lockon::bench::server_url(), key));
  return seats;
}

std::string contended_key(const std::string& tag) { return "bench:contended:" + tag; }

// Runs one thread per seat for `duration`. `Contender` offers acquire() and
// release().
template <class Contender>
ContentionResult run_contention(Seats<Contender>& seats, const std::string& tag, Clock::duration duration) {
  const int threads = static_cast<int>(seats.size());
  const std::string url = lockon::bench::server_url();
  const std::string key = contended_key(tag);
  const std::string counter = key + ":counter";
  Raw admin(url);
  admin.run({"DEL", key, counter});
  std::mutex order_mutex;
  std::vector<int> order;  // which thread ran each critical section
  std::vector<std::vector<double>> waits(static_cast<std::size_t>(threads));
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Contender& contender = seats[static_cast<std::size_t>(t)]->contender;
      Raw& data = seats[static_cast<std::size_t>(t)]->data;
      ++ready;
      while (!go) std::this_thread::yield();
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
  while (ready < threads) std::this_thread::sleep_for(1ms);
  const long long calls_before = total_calls(admin);
  const auto started = Clock::now();
  go = true;
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& th : pool) th.join();

  ContentionResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  result.calls = total_calls(admin) - calls_before - 1;  // minus our own INFO
  result.critical_sections = static_cast<long long>(order.size());
  const auto stored = admin.run({"GET", counter});
  const long long stored_count = stored->type == REDIS_REPLY_STRING ? std::stoll(stored->str) : 0;
  if (stored_count != result.critical_sections) throw std::runtime_error("counter mismatch: mutual exclusion violated");
  for (auto& w : waits) result.waits_us.insert(result.waits_us.end(), w.begin(), w.end());
  for (std::size_t i = 1; i < order.size(); ++i) result.retakes += order[i] == order[i - 1] ? 1 : 0;
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

void report_contention(benchmark::State& state, const std::string& prefix, const ContentionResult& r) {
  const double cs_per_s = static_cast<double>(r.critical_sections) / r.seconds;
  const double wait_p50 = percentile(r.waits_us, 0.50);
  state.counters[prefix + "cs_per_s"] = cs_per_s;
  state.counters[prefix + "cycle_us"] = cs_per_s > 0 ? 1e6 / cs_per_s : 0;
  state.counters[prefix + "wait_p50_us"] = wait_p50;
  state.counters[prefix + "wait_p99_us"] = percentile(r.waits_us, 0.99);
  state.counters[prefix + "wait_max_us"] = percentile(r.waits_us, 1.0);
  state.counters[prefix + "wait_max_over_p50"] = percentile(r.waits_us, 1.0) / std::max(1.0, wait_p50);
  state.counters[prefix + "retake_pct"] =
      r.critical_sections > 1 ? 100.0 * static_cast<double>(r.retakes) / static_cast<double>(r.critical_sections - 1) : 0;
  state.counters[prefix + "calls_per_cs"] =
      r.critical_sections > 0 ? static_cast<double>(r.calls) / static_cast<double>(r.critical_sections) : 0;
  // A FIFO lock with N contenders always queued makes each wait last about
  // N - 1 critical sections (Little's law); 1.0 = at that bound.
  const double threads = static_cast<double>(state.range(0));
  if (threads > 1 && cs_per_s > 0)
    state.counters[prefix + "wait_p50_over_fifo_bound"] = wait_p50 / ((threads - 1) * 1e6 / cs_per_s);
}

// The raw spin baseline and lockon run in alternating blocks inside one
// measurement, so the VM's speed drift (up to 3x within an hour here) hits
// both alike; the ratios compare like with like.
constexpr int kContentionBlocks = 6;
constexpr auto kContentionBlock = 250ms;

void BM_Contention(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  ContentionResult raw;
  ContentionResult lockon;
  for (auto _ : state) {
    raw = {};
    lockon = {};
    auto raw_seats = make_seats<RawSpinContender>(threads, contended_key("raw"));
    auto lockon_seats = make_seats<LockonContender>(threads, contended_key("lockon"));
    for (int block = 0; block < kContentionBlocks; ++block) {
      raw.merge(run_contention(raw_seats, "raw", kContentionBlock));
      lockon.merge(run_contention(lockon_seats, "lockon", kContentionBlock));
    }
  }
  report_contention(state, "raw_", raw);
  report_contention(state, "lockon_", lockon);
}

#define LOCKON_ONE_SHOT(fn) BENCHMARK(fn)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true)
// Arg: 0 = idle server, 1 = server busy with another client's traffic.
LOCKON_ONE_SHOT(BM_Handoff)->ArgName("busy_server")->Arg(0)->Arg(1);
LOCKON_ONE_SHOT(BM_HandoffLockon)->ArgName("busy_server")->Arg(0)->Arg(1);
LOCKON_ONE_SHOT(BM_ServerWakeCost);
LOCKON_ONE_SHOT(BM_Contention)->ArgName("contenders")->Arg(1)->Arg(4)->Arg(16);

const bool registered = [] {
  using lockon::bench::register_ratio;
  const std::string busy = "BM_Handoff/busy_server:1";
  const std::string idle = "BM_Handoff/busy_server:0";
  register_ratio({.label = "hand-off p50, busy server: lockon / raw spin retry", .subject = busy, .baseline = busy,
                  .metric = "lockon_p50_us", .target = 2.0, .higher_is_better = false, .baseline_metric = "raw_p50_us"});
  register_ratio({.label = "hand-off p99, busy server (us)", .subject = "BM_HandoffLockon/busy_server:1",
                  .metric = "p99_us", .target = 3000, .higher_is_better = false});
  register_ratio({.label = "  p99 right after spin-baseline blocks (us)", .subject = busy, .metric = "lockon_p99_us",
                  .informational = true});
  register_ratio({.label = "hand-off p50, idle server: lockon / raw spin retry", .subject = idle, .baseline = idle,
                  .metric = "lockon_p50_us", .higher_is_better = false, .baseline_metric = "raw_p50_us",
                  .informational = true});
  register_ratio({.label = "idle server: PING after 3 ms silence / PING in a busy loop", .subject = "BM_ServerWakeCost",
                  .baseline = "BM_ServerWakeCost", .metric = "idle_ping_p50_us", .baseline_metric = "busy_ping_p50_us",
                  .informational = true});
  register_ratio({.label = "hand-off p99, idle server (us)", .subject = "BM_HandoffLockon/busy_server:0",
                  .metric = "p99_us", .target = 3000, .higher_is_better = false});
  register_ratio({.label = "  p99 right after spin-baseline blocks (us)", .subject = idle, .metric = "lockon_p99_us",
                  .informational = true});
  for (const char* n : {"4", "16"}) {
    const std::string subject = std::string("BM_Contention/contenders:") + n;
    const std::string ways = std::string(n) + "-way: ";
    register_ratio({.label = ways + "critical sections/s, lockon / raw spin", .subject = subject, .baseline = subject,
                    .metric = "lockon_cs_per_s", .target = 0.9, .baseline_metric = "raw_cs_per_s"});
    register_ratio({.label = ways + "wait p50 / (4 x uncontended cycle)", .subject = subject,
                    .baseline = "BM_Contention/contenders:1", .metric = "lockon_wait_p50_us", .target = 1.0,
                    .higher_is_better = false, .baseline_metric = "lockon_cycle_us", .baseline_scale = 4.0});
    register_ratio({.label = ways + "wait p50 / FIFO bound ((N-1) critical sections)", .subject = subject,
                    .metric = "lockon_wait_p50_over_fifo_bound", .informational = true});
    register_ratio({.label = ways + "wait max / wait p50", .subject = subject, .metric = "lockon_wait_max_over_p50",
                    .target = 10.0, .higher_is_better = false});
    register_ratio({.label = ways + "same holder re-takes (%)", .subject = subject, .metric = "lockon_retake_pct",
                    .target = 30.0, .higher_is_better = false});
    register_ratio({.label = ways + "Redis calls per critical section / uncontended", .subject = subject,
                    .baseline = "BM_Contention/contenders:1", .metric = "lockon_calls_per_cs", .target = 2.0,
                    .higher_is_better = false});
  }
  return true;
}();

}  // namespace
