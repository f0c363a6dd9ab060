// Contention across processes: N worker processes on one key, each with its
// own lockon::Client (own pool and own subscriber, like separate services),
// against the same number of processes running a raw hiredis spin loop
// (SET NX PX retried at once, EVALSHA compare-and-delete), which is the
// independent harness's floor (see docs/benchmarks.md).
//
// Every critical section is GET + SET of a counter on a raw hiredis data
// connection (the same for both kinds, so only the lock differs). The two
// sets of processes are started once and run alternating blocks on a
// schedule fixed in advance (CLOCK_MONOTONIC is shared by the processes of
// one machine), so the machine's drift hits both alike. Each worker reports
// per block: its critical sections, the counter value it wrote in each (the
// global order, for same-holder re-takes), each acquire's wait, and its
// context switches and CPU time (getrusage, all threads); and, per critical
// section, when its acquire returned and its release began (µs into the
// block, comparable across processes) and how long its GET + SET took:
// where a critical section's time goes (hand-over vs. round trips).
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "lockon/lock.hpp"
#include "support/process.hpp"

namespace lockon::bench {
int process_worker_main(int argc, char** argv);
}

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
// Per kind, after one warm-up block (not counted: connections, the
// subscription, the script cache and the scheduler settle in it).
constexpr int kBlocks = 4;
constexpr auto kBlock = 400ms;
constexpr auto kGap = 100ms;            // between blocks: the previous block's stragglers finish
constexpr auto kStartupAllowance = 1500ms;  // exec, connect and warm up before the first block

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

 private:
  std::unique_ptr<redisContext, decltype(&redisFree)> context_{nullptr, &redisFree};
};

long long ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
Clock::time_point from_ns(long long ns) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

struct Usage {
  long long voluntary = 0, involuntary = 0;
  double cpu_s = 0;
  static Usage now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return {u.ru_nvcsw, u.ru_nivcsw,
            static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6};
  }
};

// ------------------------------------------------------------------ worker

struct SpinLock {
  SpinLock(const std::string& url, std::string key) : raw(url), key_(std::move(key)) {
    token = std::to_string(::getpid());
    sha = raw.run({"SCRIPT", "LOAD", kCompareAndDelete})->str;
  }
  void acquire() {
    while (raw.run({"SET", key_, token, "NX", "PX", "30000"})->type == REDIS_REPLY_NIL) {
    }
  }
  void release() { raw.run({"EVALSHA", sha, "1", key_, token}); }
  Raw raw;
  std::string key_, token, sha;
};

struct LockonLock {
  LockonLock(const std::string& url, const std::string& key, lockon::LockOptions options = {})
      : client(url), lock(client, key, std::move(options)) {
    client.ping();
  }
  void acquire() {
    if (!lock.try_lock_for(10s)) throw std::runtime_error("lockon worker: no grant within 10 s");
  }
  void release() { lock.unlock(); }
  lockon::Client client;
  lockon::Lock lock;
};

// argv: kind url lock_key counter_prefix start_ns,stop_ns ...
template <class L>
int run_worker(L& lock, Raw& data, const std::string& counter_prefix, const std::vector<std::pair<long long, long long>>& blocks) {
  std::ostringstream out;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::string counter = counter_prefix + std::to_string(b);
    std::this_thread::sleep_until(from_ns(blocks[b].first));
    const auto stop = from_ns(blocks[b].second);
    std::vector<long long> seqs;
    std::vector<long long> waits;
    std::vector<long long> acquired_at, releasing_at, data_us;  // phases, µs (see the top)
    const auto block_start = from_ns(blocks[b].first);
    const auto us_since = [](Clock::time_point from, Clock::time_point to) {
      return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
    };
    std::vector<std::pair<long long, long long>> slow;  // (µs into the block, wait µs) of waits > 2 ms
    const auto began = Clock::now();
    const Usage before = Usage::now();
    while (Clock::now() < stop) {
      const auto t0 = Clock::now();
      lock.acquire();
      const auto acquired = Clock::now();
      waits.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
      if (waits.back() > 2000)
        slow.push_back({std::chrono::duration_cast<std::chrono::microseconds>(t0 - began).count(), waits.back()});
      const auto value = data.run({"GET", counter});
      const long long next = (value->type == REDIS_REPLY_STRING ? std::stoll(value->str) : 0) + 1;
      data.run({"SET", counter, std::to_string(next)});
      seqs.push_back(next);
      const auto releasing = Clock::now();
      acquired_at.push_back(us_since(block_start, acquired));
      releasing_at.push_back(us_since(block_start, releasing));
      data_us.push_back(us_since(acquired, releasing));
      lock.release();
    }
    const Usage after = Usage::now();
    out << "block " << b << ' ' << seqs.size() << ' ' << (after.voluntary - before.voluntary) << ' '
        << (after.involuntary - before.involuntary) << ' ' << (after.cpu_s - before.cpu_s) << "\nseq";
    for (const long long s : seqs) out << ' ' << s;
    out << "\nwait";
    for (const long long w : waits) out << ' ' << w;
    for (const auto& [tag, values] : {std::pair{"acq", &acquired_at}, {"rel", &releasing_at}, {"data", &data_us}}) {
      out << '\n' << tag;
      for (const long long v : *values) out << ' ' << v;
    }
    out << "\nslow";  // for reading by hand (docs/benchmarks.md)
    for (const auto& [at, w] : slow) out << ' ' << at << ':' << w;
    out << '\n';
  }
  std::cout << out.str() << "done" << std::endl;
  return 0;
}

// ------------------------------------------------------------------ parent

struct KindResult {
  long long critical_sections = 0, retakes = 0, voluntary = 0, involuntary = 0, server_calls = 0;
  double seconds = 0, cpu_s = 0, server_cpu_s = 0;
  std::vector<double> waits_us;
  std::vector<double> data_us;      // a critical section's GET + SET
  std::vector<double> handover_us;  // a release begins -> the next holder's acquire returns
  // The same two for sections whose holder is another process than the
  // previous one's: the spin loop re-takes about half of its sections in
  // the process that just released (hot, no wake-up), which a FIFO lock
  // never does (docs/benchmarks.md, session 14).
  std::vector<double> switch_data_us, switch_handover_us;
};

// One critical section as the parent pieces it together.
struct Section {
  long long seq = 0;
  int worker = 0;
  long long acquired_us = 0, releasing_us = 0, data_us = -1;
  bool operator<(const Section& other) const { return seq < other.seq; }
};

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(p * static_cast<double>(values.size() - 1))];
}

// Parses the workers' reports of one kind and checks the counters.
void collect(std::vector<lockon::test::Child>& children, Raw& admin, const std::string& counter_prefix, KindResult& r) {
  std::vector<std::vector<Section>> order(kBlocks + 1);  // per block
  std::vector<long long> totals(kBlocks + 1, 0);
  for (std::size_t w = 0; w < children.size(); ++w) {
    const auto result = children[w].wait(60s);
    if (!result.succeeded()) throw std::runtime_error("process worker failed: " + result.describe());
    std::istringstream in(result.out);
    std::string line;
    int block = -1;
    std::size_t first = 0;  // this worker's first section of the block in order[block]
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string tag;
      fields >> tag;
      if (tag == "block") {
        long long n = 0, vol = 0, invol = 0;
        double cpu = 0;
        fields >> block >> n >> vol >> invol >> cpu;
        totals[static_cast<std::size_t>(block)] += n;
        if (block == 0) continue;  // warm-up
        r.voluntary += vol;
        r.involuntary += invol;
        r.cpu_s += cpu;
      } else if (tag == "seq") {
        auto& sections = order[static_cast<std::size_t>(block)];
        first = sections.size();
        for (long long s = 0; fields >> s;) sections.push_back({s, static_cast<int>(w)});
      } else if (tag == "acq" || tag == "rel" || tag == "data") {
        auto& sections = order[static_cast<std::size_t>(block)];
        std::size_t i = first;
        for (long long us = 0; fields >> us && i < sections.size(); ++i)
          (tag == "acq" ? sections[i].acquired_us : tag == "rel" ? sections[i].releasing_us : sections[i].data_us) = us;
      } else if (tag == "slow" && std::getenv("LOCKON_BENCH_SLOW") != nullptr && line.size() > 4) {
        std::cerr << counter_prefix << " worker " << w << " block " << block << " (µs into it:wait µs):" << line.substr(4)
                  << '\n';
      } else if (tag == "wait" && block > 0) {
        for (long long us = 0; fields >> us;) r.waits_us.push_back(static_cast<double>(us));
      }
    }
  }
  for (int b = 0; b <= kBlocks; ++b) {
    const auto stored = admin.run({"GET", counter_prefix + std::to_string(b)});
    const long long count = stored->type == REDIS_REPLY_STRING ? std::stoll(stored->str) : 0;
    if (count != totals[static_cast<std::size_t>(b)])
      throw std::runtime_error("counter mismatch: mutual exclusion violated");
    if (b == 0) continue;  // warm-up
    auto& o = order[static_cast<std::size_t>(b)];
    std::sort(o.begin(), o.end());
    for (const Section& section : o)
      if (section.data_us >= 0) r.data_us.push_back(static_cast<double>(section.data_us));
    for (std::size_t i = 1; i < o.size(); ++i) {
      const bool retake = o[i].worker == o[i - 1].worker;
      r.retakes += retake ? 1 : 0;
      if (!retake && o[i].data_us >= 0) r.switch_data_us.push_back(static_cast<double>(o[i].data_us));
      if (o[i].seq == o[i - 1].seq + 1) {
        const auto handover = static_cast<double>(o[i].acquired_us - o[i - 1].releasing_us);
        r.handover_us.push_back(handover);
        if (!retake) r.switch_handover_us.push_back(handover);
      }
    }
    r.critical_sections += count;
  }
  r.seconds = kBlocks * std::chrono::duration<double>(kBlock).count();
}

// The server's CPU seconds and command count so far (INFO), sampled at the
// block boundaries: what each kind costs Redis.
std::pair<double, long long> server_usage(Raw& admin) {
  const auto info = admin.run({"INFO", "all"});
  const std::string text(info->str, info->len);
  const auto number = [&](const std::string& field) {
    const auto at = text.find(field + ":");
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + field.size() + 1));
  };
  long long calls = 0;
  for (std::size_t at = text.find("calls="); at != std::string::npos; at = text.find("calls=", at + 6))
    calls += std::stoll(text.substr(at + 6));
  return {number("used_cpu_sys") + number("used_cpu_user"), calls};
}

void report(benchmark::State& state, const std::string& prefix, const KindResult& r) {
  const double cs = static_cast<double>(std::max(1LL, r.critical_sections));
  const double p50 = percentile(r.waits_us, 0.5);
  state.counters[prefix + "cs_per_s"] = static_cast<double>(r.critical_sections) / r.seconds;
  state.counters[prefix + "retake_pct"] = 100.0 * static_cast<double>(r.retakes) / cs;
  state.counters[prefix + "wait_p50_us"] = p50;
  state.counters[prefix + "wait_p99_us"] = percentile(r.waits_us, 0.99);
  state.counters[prefix + "wait_max_us"] = percentile(r.waits_us, 1.0);
  state.counters[prefix + "wait_max_over_p50"] = percentile(r.waits_us, 1.0) / std::max(1.0, p50);
  state.counters[prefix + "vcsw_per_cs"] = static_cast<double>(r.voluntary) / cs;
  state.counters[prefix + "ivcsw_per_cs"] = static_cast<double>(r.involuntary) / cs;
  state.counters[prefix + "cpu_us_per_cs"] = 1e6 * r.cpu_s / cs;
  state.counters[prefix + "server_cpu_us_per_cs"] = 1e6 * r.server_cpu_s / cs;
  state.counters[prefix + "server_calls_per_cs"] = static_cast<double>(r.server_calls) / cs;
  state.counters[prefix + "data_p50_us"] = percentile(r.data_us, 0.5);
  state.counters[prefix + "handover_p50_us"] = percentile(r.handover_us, 0.5);
  state.counters[prefix + "switch_data_p50_us"] = percentile(r.switch_data_us, 0.5);
  state.counters[prefix + "switch_handover_p50_us"] = percentile(r.switch_handover_us, 0.5);
}

void BM_ContentionProcesses(benchmark::State& state) {
  const int processes = static_cast<int>(state.range(0));
  const std::string url = lockon::bench::server_url();
  Raw admin(url);
  static int run = 0;
  // "sleep": lockon with LockOptions::handoff_spin = 0 (waiters always
  // sleep until their wake-up), which shows what the spin buys.
  const std::array<std::string, 3> kinds{"spin", "lockon", "sleep"};
  std::array<KindResult, 3> results;
  for (auto _ : state) {
    results = {};
    const std::string tag = "bench:proc:" + std::to_string(processes) + ":" + std::to_string(run++);
    // Alternating schedule: spin block 0, lockon block 0, sleep block 0, spin block 1, ...
    const auto first = Clock::now() + kStartupAllowance;
    std::array<std::vector<std::string>, 3> blocks;
    for (int b = 0; b <= kBlocks; ++b) {
      for (std::size_t k = 0; k < kinds.size(); ++k) {
        const auto s0 = first + (static_cast<int>(kinds.size()) * b + static_cast<int>(k)) * (kBlock + kGap);
        blocks[k].push_back(std::to_string(ns_of(s0)) + "," + std::to_string(ns_of(s0 + kBlock)));
      }
    }
    const auto spawn_set = [&](const std::string& kind, const std::vector<std::string>& schedule) {
      std::vector<lockon::test::Child> set;
      for (int p = 0; p < processes; ++p) {
        std::vector<std::string> argv{"/proc/self/exe", "--process-worker", kind, url, tag + ":" + kind,
                                      tag + ":" + kind + ":counter:"};
        argv.insert(argv.end(), schedule.begin(), schedule.end());
        set.push_back(lockon::test::spawn(argv));
      }
      return set;
    };
    std::vector<std::vector<lockon::test::Child>> sets;
    for (std::size_t k = 0; k < kinds.size(); ++k) sets.push_back(spawn_set(kinds[k], blocks[k]));
    const int per_round = static_cast<int>(kinds.size());
    for (int b = per_round; b < per_round * (kBlocks + 1); ++b) {
      KindResult& kind = results[static_cast<std::size_t>(b % per_round)];
      const auto start = first + b * (kBlock + kGap);
      std::this_thread::sleep_until(start);
      const auto before = server_usage(admin);
      std::this_thread::sleep_until(start + kBlock);
      const auto after = server_usage(admin);
      kind.server_cpu_s += after.first - before.first;
      kind.server_calls += after.second - before.second - 1;  // minus our INFO
    }
    for (std::size_t k = 0; k < kinds.size(); ++k)
      collect(sets[k], admin, tag + ":" + kinds[k] + ":counter:", results[k]);
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) report(state, kinds[k] + "_", results[k]);
}

BENCHMARK(BM_ContentionProcesses)
    ->ArgName("processes")
    ->Arg(4)
    ->Arg(16)
    ->Iterations(1)
    ->Repetitions(3)
    ->UseRealTime()
    ->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  for (const auto& [n, target] : {std::pair{"4", 0.9}, std::pair{"16", 2.0}}) {
    const std::string subject = std::string("BM_ContentionProcesses/processes:") + n;
    const std::string ways = std::string(n) + " processes: ";
    register_ratio({.label = ways + "critical sections/s, lockon / raw spin", .subject = subject, .baseline = subject,
                    .metric = "lockon_cs_per_s", .target = target, .baseline_metric = "spin_cs_per_s"});
    register_ratio({.label = ways + "same holder re-takes (%)", .subject = subject, .metric = "lockon_retake_pct",
                    .target = 1.0, .higher_is_better = false});
    register_ratio({.label = ways + "wait max / wait p50", .subject = subject, .metric = "lockon_wait_max_over_p50",
                    .target = 10.0, .higher_is_better = false});
    register_ratio({.label = ways + "raw spin: same holder re-takes (%)", .subject = subject,
                    .metric = "spin_retake_pct", .informational = true});
    register_ratio({.label = ways + "lockon, handoff_spin 0 (always sleep) / raw spin", .subject = subject,
                    .baseline = subject, .metric = "sleep_cs_per_s",
                    .baseline_metric = "spin_cs_per_s", .informational = true});
    register_ratio({.label = ways + "client CPU µs per critical section, lockon / handoff_spin 0", .subject = subject,
                    .baseline = subject, .metric = "lockon_cpu_us_per_cs",
                    .baseline_metric = "sleep_cpu_us_per_cs", .informational = true});
    // Where a critical section's time goes (docs/benchmarks.md, session 12):
    // its two raw round trips, and release -> next holder's acquire.
    register_ratio({.label = ways + "GET + SET inside, p50 µs, lockon / raw spin", .subject = subject,
                    .baseline = subject, .metric = "lockon_data_p50_us", .baseline_metric = "spin_data_p50_us",
                    .informational = true});
    register_ratio({.label = ways + "release -> next acquire returns, p50 µs, lockon / raw spin", .subject = subject,
                    .baseline = subject, .metric = "lockon_handover_p50_us",
                    .baseline_metric = "spin_handover_p50_us", .informational = true});
    // The spin loop's sections that changed process, as every FIFO one does.
    register_ratio({.label = ways + "raw spin, another process than the last: GET + SET p50 µs / all", .subject = subject,
                    .baseline = subject, .metric = "spin_switch_data_p50_us", .baseline_metric = "spin_data_p50_us",
                    .informational = true});
    register_ratio({.label = ways + "raw spin, another process than the last: release -> acquire p50 µs / all",
                    .subject = subject, .baseline = subject, .metric = "spin_switch_handover_p50_us",
                    .baseline_metric = "spin_handover_p50_us", .informational = true});
  }
  return true;
}();

}  // namespace

namespace lockon::bench {

// lockon_benchmarks --process-worker KIND URL LOCK_KEY COUNTER_PREFIX START_NS,STOP_NS...
int process_worker_main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: --process-worker spin|lockon URL LOCK_KEY COUNTER_PREFIX START_NS,STOP_NS...\n";
    return 2;
  }
  const std::string kind = argv[0], url = argv[1], key = argv[2], counter_prefix = argv[3];
  std::vector<std::pair<long long, long long>> blocks;
  for (int i = 4; i < argc; ++i) {
    const std::string spec = argv[i];
    const auto comma = spec.find(',');
    blocks.push_back({std::stoll(spec.substr(0, comma)), std::stoll(spec.substr(comma + 1))});
  }
  try {
    Raw data(url);
    if (Clock::now() >= from_ns(blocks.front().first)) throw std::runtime_error("started after the first block began");
    if (kind == "spin") {
      SpinLock lock(url, key);
      return run_worker(lock, data, counter_prefix, blocks);
    }
    lockon::LockOptions options;
    if (kind == "sleep") options.handoff_spin = std::chrono::microseconds(0);
    LockonLock lock(url, key, std::move(options));
    return run_worker(lock, data, counter_prefix, blocks);
  } catch (const std::exception& e) {
    std::cerr << "process worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace lockon::bench
