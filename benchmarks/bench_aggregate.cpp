// Aggregate throughput: 64 threads calling one RedisLocker's lock_on-wrapped
// no-op, each thread on its own key (no contention), against the server's
// capacity for the same commands measured in the same run by a raw hiredis
// client that pipelines: one connection, 64 SET NX PX GET (distinct keys)
// in one write, their 64 replies, then 64 EVALSHA compare-and-delete in one
// write and their replies; and a second baseline that pipelines lockon's
// own commands on lock_on's own keys. Blocks alternate inside one
// measurement. The subject is the default RedisLocker (automatic
// pipelining since session 8). Also reported: lockon with the pool
// (auto_pipeline=0) of 8 and of 64 connections, 64 threads
// each with its own raw hiredis connection, without pipelining (what 64
// blocking clients can get), and 64 threads through a sketch of automatic
// pipelining (Multiplexer: the ceiling of that design on this machine).
// Per mode also: context switches, this process's and the server's CPU per
// cycle, the server's commands per cycle and per read (Meter), to see where
// the time goes; BM_AutoPipeline64ThreadsAlone is the auto_pipeline mode
// alone, for profilers.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <utility>
#include <sstream>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "protocol/holder_record.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/lockon.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kThreads = 64;
constexpr int kBlocks = 5;
constexpr auto kBlock = 300ms;
constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

struct FreeContext {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, FreeContext>;

Context connect(const std::string& url) {
  const auto options = lockon::ConnectionOptions::from_url(url);
  Context context(redisConnect(options.host.c_str(), options.port));
  if (!context || context->err) throw std::runtime_error("cannot connect to " + url);
  return context;
}

void append(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
    throw std::runtime_error("append failed");
}

void read_replies(redisContext* c, int n) {
  for (int i = 0; i < n; ++i) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) throw std::runtime_error("raw reply failed");
    freeReplyObject(reply);
  }
}

std::string load_script(redisContext* c) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %s", kCompareAndDelete));
  if (reply == nullptr || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("SCRIPT LOAD failed");
  std::string sha(reply->str, reply->len);
  freeReplyObject(reply);
  return sha;
}

// Where the time goes, per mode: this process's CPU (user + system) and
// context switches (voluntary + involuntary, getrusage), and the server's CPU
// (/proc/<pid>/stat, the pid from INFO server; clock ticks, so +-1 tick).
struct Usage {
  double wall = 0, cpu = 0, switches = 0, involuntary = 0, server_cpu = 0, commands = 0, reads = 0, cycles = 0;
};

double server_cpu_seconds(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// INFO stats: total commands processed and reads made by the server.
std::pair<double, double> server_commands_and_reads(redisContext* c) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO stats"));
  if (reply == nullptr || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("INFO failed");
  const std::string info(reply->str, reply->len);
  freeReplyObject(reply);
  const auto stat = [&](const std::string& name) {
    const auto at = info.find(name + ":");
    return at == std::string::npos ? 0.0 : std::stod(info.substr(at + name.size() + 1));
  };
  return {stat("total_commands_processed"), stat("total_reads_processed")};
}

long server_pid(redisContext* c) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "INFO server"));
  if (reply == nullptr || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("INFO failed");
  const std::string info(reply->str, reply->len);
  freeReplyObject(reply);
  const auto at = info.find("process_id:");
  return at == std::string::npos ? 0 : std::stol(info.substr(at + 11));
}

class Meter {
 public:
  // `probe`: a connection of its own for INFO (its own commands are
  // subtracted: one INFO per sample).
  Meter(long pid, redisContext* probe) : pid_(pid), probe_(probe) {}
  // Runs `block` (returns cycles/s over `kBlock`) and charges its usage to `mode`.
  template <class Block>
  double measure(const std::string& mode, Block&& block) {
    const Sample before = sample();
    const double rate = block();
    const Sample after = sample();
    Usage& u = usage_[mode];
    const double wall = std::chrono::duration<double>(after.at - before.at).count();
    u.wall += wall;
    u.cpu += after.cpu - before.cpu;
    u.switches += after.switches - before.switches;
    u.involuntary += after.involuntary - before.involuntary;
    u.server_cpu += after.server_cpu - before.server_cpu;
    u.commands += after.commands - before.commands - 1;
    u.reads += after.reads - before.reads - 1;
    u.cycles += rate * wall;
    return rate;
  }
  void report(benchmark::State& state) const {
    for (const auto& [mode, u] : usage_) {
      if (u.cycles <= 0) continue;
      state.counters[mode + "_switches_per_cycle"] = u.switches / u.cycles;
      state.counters[mode + "_involuntary_switches_per_cycle"] = u.involuntary / u.cycles;
      state.counters[mode + "_client_cpu_us_per_cycle"] = 1e6 * u.cpu / u.cycles;
      state.counters[mode + "_server_cpu_us_per_cycle"] = 1e6 * u.server_cpu / u.cycles;
      state.counters[mode + "_server_cpu_pct"] = 100 * u.server_cpu / u.wall;
      // Commands per cycle, and per read the server made (its batch size).
      state.counters[mode + "_server_commands_per_cycle"] = u.commands / u.cycles;
      state.counters[mode + "_server_commands_per_read"] = u.reads > 0 ? u.commands / u.reads : 0;
    }
  }

 private:
  struct Sample {
    Clock::time_point at;
    double cpu, switches, involuntary, server_cpu, commands, reads;
  };
  Sample sample() const {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    const auto [commands, reads] = server_commands_and_reads(probe_);
    const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
    return {Clock::now(), seconds(r.ru_utime) + seconds(r.ru_stime), static_cast<double>(r.ru_nvcsw + r.ru_nivcsw), static_cast<double>(r.ru_nivcsw),
            pid_ > 0 ? server_cpu_seconds(pid_) : 0, commands, reads};
  }
  long pid_;
  redisContext* probe_;
  std::map<std::string, Usage> usage_;
};

// Cycles (acquire + release of one key) per second through one pipelining
// connection, 64 keys per batch.
double raw_pipelined(redisContext* c, const std::string& sha, Clock::duration duration) {
  long long cycles = 0;
  const auto started = Clock::now();
  while (Clock::now() - started < duration) {
    for (int k = 0; k < kThreads; ++k)
      append(c, {"SET", "bench:agg:raw:" + std::to_string(k), "token", "NX", "PX", "30000", "GET"});
    read_replies(c, kThreads);
    for (int k = 0; k < kThreads; ++k) append(c, {"EVALSHA", sha, "1", "bench:agg:raw:" + std::to_string(k), "token"});
    read_replies(c, kThreads);
    cycles += kThreads;
  }
  return static_cast<double>(cycles) / std::chrono::duration<double>(Clock::now() - started).count();
}

// The server's capacity for lockon's OWN commands (issue 18 says "for the
// same commands"): per cycle, the acquisition's SET NX PX GET and the holder
// record's SET NX PX, then EVALSHA of lockon's release script over its four
// keys — on lock_on's own keys (their length costs the server too), 64
// cycles per write like raw_pipelined. Reported beside the stricter
// baseline above, whose cycle is the raw floor's cheaper two commands.
struct LockonCommands {
  std::vector<std::string> keys;   // K
  std::vector<std::string> whos;   // companion_key(K, "who")
  std::vector<lockon::detail::LockScriptKeys> script_keys;  // lock_script_keys(K): what the release script takes
  std::string sha;                 // lockon's release script
  std::string record;              // a holder record of the real length
};

double raw_pipelined_lockon_commands(redisContext* c, const LockonCommands& cmd, Clock::duration duration) {
  long long cycles = 0;
  const auto started = Clock::now();
  const std::string token = "0123456789abcdef0123456789abcdef";  // 128-bit hex, as lockon's
  while (Clock::now() - started < duration) {
    for (int k = 0; k < kThreads; ++k) {
      const auto i = static_cast<std::size_t>(k);
      append(c, {"SET", cmd.keys[i], token, "NX", "PX", "30000", "GET"});
      append(c, {"SET", cmd.whos[i], cmd.record, "NX", "PX", "30000"});
    }
    read_replies(c, 2 * kThreads);
    for (int k = 0; k < kThreads; ++k) {
      const auto i = static_cast<std::size_t>(k);
      std::vector<std::string> release{"EVALSHA", cmd.sha, std::to_string(lockon::detail::kLockScriptKeys)};
      release.insert(release.end(), cmd.script_keys[i].begin(), cmd.script_keys[i].end());
      release.push_back(token);
      append(c, release);
    }
    read_replies(c, kThreads);
    cycles += kThreads;
  }
  return static_cast<double>(cycles) / std::chrono::duration<double>(Clock::now() - started).count();
}

// The design proposed for the client layer (automatic pipelining), in its
// simplest form, to see how far a *blocking* API can get: callers queue
// their command and sleep on their own condition variable; one I/O thread
// per connection takes everything queued, writes it in one go, reads the
// replies in order and wakes each caller (as ioredis/Lettuce do with an
// event loop). One batch in flight at a time.
class Multiplexer {
 public:
  explicit Multiplexer(const std::string& url) : context_(connect(url)), io_([this] { run(); }) {}
  ~Multiplexer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    queued_cv_.notify_one();
    io_.join();
  }
  Multiplexer(const Multiplexer&) = delete;
  Multiplexer& operator=(const Multiplexer&) = delete;

  // Sends one command and waits for its reply (dropped: the benchmark
  // needs the round trip, not the value).
  void call(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    char* formatted = nullptr;
    const long long len = redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (len < 0) throw std::runtime_error("format failed");
    Request request;
    request.bytes.assign(formatted, static_cast<std::size_t>(len));
    redisFreeCommand(formatted);
    {
      std::lock_guard lock(mutex_);
      queued_.push_back(&request);
    }
    queued_cv_.notify_one();
    std::unique_lock lock(request.mutex);
    request.cv.wait(lock, [&] { return request.done; });
  }

 private:
  struct Request {
    std::string bytes;
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };

  void run() {
    std::vector<Request*> batch;
    while (true) {
      {
        std::unique_lock lock(mutex_);
        queued_cv_.wait(lock, [&] { return stop_ || !queued_.empty(); });
        if (stop_ && queued_.empty()) return;
        batch.swap(queued_);
      }
      for (Request* r : batch)
        if (redisAppendFormattedCommand(context_.get(), r->bytes.data(), r->bytes.size()) != REDIS_OK)
          throw std::runtime_error("append failed");
      read_replies(context_.get(), static_cast<int>(batch.size()));
      for (Request* r : batch) {
        {
          std::lock_guard lock(r->mutex);
          r->done = true;
        }
        r->cv.notify_one();
      }
      batch.clear();
    }
  }

  Context context_;
  std::mutex mutex_;
  std::condition_variable queued_cv_;
  std::vector<Request*> queued_;
  bool stop_ = false;
  std::thread io_;
};

// Runs `body(thread index)` in kThreads threads for `duration`; returns
// calls per second.
template <class Body>
double run_threads(Clock::duration duration, Body&& body) {
  std::atomic<bool> go{false};
  std::atomic<bool> stop{false};
  std::atomic<long long> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go) std::this_thread::yield();
      long long mine = 0;
      while (!stop) {
        body(t);
        ++mine;
      }
      calls += mine;
    });
  }
  const auto started = Clock::now();
  go = true;
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& th : threads) th.join();
  return static_cast<double>(calls) / std::chrono::duration<double>(Clock::now() - started).count();
}

void noop(int key) { benchmark::DoNotOptimize(key); }

void BM_Aggregate64Threads(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  // The pool (auto_pipeline=0; the default until session 8): a pooled
  // connection per call.
  const std::string pool_url = url + (url.find('?') == std::string::npos ? "?" : "&") + "auto_pipeline=0";
  const lockon::RedisLocker locker(pool_url, {.key_prefix = "bench:agg"});
  const auto locked = locker.lock_on<0>("bench::agg", &noop);
  // The same with a connection per thread: what the pool's size costs.
  const lockon::RedisLocker wide(pool_url, {.key_prefix = "bench:agg"}, {.size = kThreads});
  const auto locked_wide = wide.lock_on<0>("bench::agg", &noop);
  // The default: automatic pipelining (ConnectionOptions::auto_pipeline).
  const lockon::RedisLocker shared(url, {.key_prefix = "bench:agg"});
  const auto locked_shared = shared.lock_on<0>("bench::agg", &noop);
  // The same with ConnectionOptions::reply_spin = 0: the I/O thread always
  // sleeps for its replies (what the polling buys, in the same run).
  auto sleeping_options = lockon::ConnectionOptions::from_url(url);
  sleeping_options.reply_spin = std::chrono::microseconds(0);
  const lockon::RedisLocker sleeping(lockon::Client(sleeping_options), {.key_prefix = "bench:agg"});
  const auto locked_sleeping = sleeping.lock_on<0>("bench::agg", &noop);
  double sleeping_sum = 0;
  Context pipelined = connect(url);
  const std::string sha = load_script(pipelined.get());
  LockonCommands own_commands;
  for (int t = 0; t < kThreads; ++t) {
    const std::string key = locked_shared.key_for(t);
    own_commands.keys.push_back(key);
    own_commands.whos.push_back(lockon::detail::companion_key(key, "who"));
    own_commands.script_keys.push_back(lockon::detail::lock_script_keys(key));
  }
  own_commands.record = lockon::detail::holder_record("0123456789abcdef", "");
  {
    const std::string& body = lockon::detail::scripts::release(false).body();
    auto* loaded = static_cast<redisReply*>(redisCommand(pipelined.get(), "SCRIPT LOAD %b", body.data(), body.size()));
    if (loaded == nullptr || loaded->type != REDIS_REPLY_STRING) throw std::runtime_error("SCRIPT LOAD (release) failed");
    own_commands.sha.assign(loaded->str, loaded->len);
    freeReplyObject(loaded);
  }
  double same_sum = 0;
  std::vector<Context> own;  // one connection per thread, no pipelining
  for (int t = 0; t < kThreads; ++t) own.push_back(connect(url));
  Multiplexer multiplexer(url);
  double shared_sum = 0;
  double lockon_sum = 0, raw_sum = 0, blocking_sum = 0, wide_sum = 0, multiplexed_sum = 0;
  Context probe = connect(url);
  Meter meter(server_pid(probe.get()), probe.get());
  for (auto _ : state) {
    for (int block = 0; block < kBlocks; ++block) {
      raw_sum += meter.measure("raw_pipelined", [&] { return raw_pipelined(pipelined.get(), sha, kBlock); });
      same_sum += meter.measure("raw_pipelined_lockon_commands",
                                [&] { return raw_pipelined_lockon_commands(pipelined.get(), own_commands, kBlock); });
      lockon_sum += meter.measure("pool", [&] { return run_threads(kBlock, [&](int t) { locked(t); }); });
      wide_sum += meter.measure("pool64", [&] { return run_threads(kBlock, [&](int t) { locked_wide(t); }); });
      shared_sum +=
          meter.measure("auto_pipeline", [&] { return run_threads(kBlock, [&](int t) { locked_shared(t); }); });
      sleeping_sum += meter.measure("auto_pipeline_sleep",
                                    [&] { return run_threads(kBlock, [&](int t) { locked_sleeping(t); }); });
      blocking_sum += meter.measure("raw_64_connections", [&] {
        return run_threads(kBlock, [&](int t) {
          redisContext* c = own[static_cast<std::size_t>(t)].get();
          const std::string key = "bench:agg:own:" + std::to_string(t);
          append(c, {"SET", key, "token", "NX", "PX", "30000", "GET"});
          read_replies(c, 1);
          append(c, {"EVALSHA", sha, "1", key, "token"});
          read_replies(c, 1);
        });
      });
      multiplexed_sum += meter.measure("raw_multiplexed", [&] {
        return run_threads(kBlock, [&](int t) {
          const std::string key = "bench:agg:mux:" + std::to_string(t);
          multiplexer.call({"SET", key, "token", "NX", "PX", "30000", "GET"});
          multiplexer.call({"EVALSHA", sha, "1", key, "token"});
        });
      });
    }
  }
  meter.report(state);
  state.counters["lockon_pool_cycles_per_s"] = lockon_sum / kBlocks;
  state.counters["lockon_pool64_cycles_per_s"] = wide_sum / kBlocks;
  state.counters["lockon_auto_pipeline_cycles_per_s"] = shared_sum / kBlocks;
  state.counters["lockon_auto_pipeline_sleep_cycles_per_s"] = sleeping_sum / kBlocks;
  state.counters["raw_multiplexed_cycles_per_s"] = multiplexed_sum / kBlocks;
  state.counters["raw_pipelined_cycles_per_s"] = raw_sum / kBlocks;
  state.counters["raw_pipelined_lockon_commands_cycles_per_s"] = same_sum / kBlocks;
  state.counters["raw_64_connections_cycles_per_s"] = blocking_sum / kBlocks;
}

// For profilers (strace -c -f, perf, callgrind): the auto_pipeline mode
// alone for ~3 s, with the same usage counters. No baseline: not a ratio.
void BM_AutoPipeline64ThreadsAlone(benchmark::State& state) {
  const std::string url = lockon::bench::server_url();
  const lockon::RedisLocker shared(url, {.key_prefix = "bench:agg"});  // auto_pipeline: the default
  const auto locked_shared = shared.lock_on<0>("bench::agg", &noop);
  Context probe = connect(url);
  Meter meter(server_pid(probe.get()), probe.get());
  double sum = 0;
  for (auto _ : state)
    for (int block = 0; block < 10; ++block)
      sum += meter.measure("auto_pipeline", [&] { return run_threads(kBlock, [&](int t) { locked_shared(t); }); });
  state.counters["lockon_auto_pipeline_cycles_per_s"] = sum / 10;
  meter.report(state);
}

BENCHMARK(BM_AutoPipeline64ThreadsAlone)->Iterations(1)->UseRealTime();

BENCHMARK(BM_Aggregate64Threads)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "64 threads, distinct keys, one RedisLocker (default: auto_pipeline) / raw pipelined capacity",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_auto_pipeline_cycles_per_s", .target = 0.7,
                  .baseline_metric = "raw_pipelined_cycles_per_s"});
  register_ratio({.label = "64 threads, one RedisLocker (default: auto_pipeline) / raw pipelined capacity for lockon's own commands",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_auto_pipeline_cycles_per_s", .target = 0.7,
                  .baseline_metric = "raw_pipelined_lockon_commands_cycles_per_s"});
  register_ratio({.label = "  the same with reply_spin 0 (I/O thread always sleeps) / capacity for lockon's own commands",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_auto_pipeline_sleep_cycles_per_s",
                  .baseline_metric = "raw_pipelined_lockon_commands_cycles_per_s", .informational = true});
  register_ratio({.label = "  the same with auto_pipeline=0 (the pool) / raw pipelined capacity",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_pool_cycles_per_s", .baseline_metric = "raw_pipelined_cycles_per_s",
                  .informational = true});
  register_ratio({.label = "  the same with auto_pipeline=0 (the pool) / raw pipelined capacity for lockon's own commands",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_pool_cycles_per_s", .baseline_metric = "raw_pipelined_lockon_commands_cycles_per_s",
                  .informational = true});
  register_ratio({.label = "  the same with a 64-connection pool / raw pipelined capacity",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "lockon_pool64_cycles_per_s", .baseline_metric = "raw_pipelined_cycles_per_s",
                  .informational = true});
  register_ratio({.label = "  64 threads through one auto-pipelining connection (sketch) / capacity",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "raw_multiplexed_cycles_per_s", .baseline_metric = "raw_pipelined_cycles_per_s",
                  .informational = true});
  register_ratio({.label = "  64 raw blocking connections (no pipelining) / raw pipelined capacity",
                  .subject = "BM_Aggregate64Threads", .baseline = "BM_Aggregate64Threads",
                  .metric = "raw_64_connections_cycles_per_s", .baseline_metric = "raw_pipelined_cycles_per_s",
                  .informational = true});
  return true;
}();

}  // namespace
