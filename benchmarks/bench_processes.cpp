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
//
// Three more kinds of workers place lockon between the spin loop and the
// cheapest fair lock Redis allows (docs/benchmarks.md, session 19): a token
// ring (RingLock: every hand-over one RPUSH onto a list the next process
// BLPOPs), and a bare FIFO lock of lockon's shape (QueueLock: a queueing
// script and a releasing script, waking by list or by pub/sub).
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

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
#include "process_bench.hpp"
#include "support/process.hpp"

namespace {

using namespace lockon::bench::processes;
using namespace std::chrono_literals;

// Per kind, after one warm-up block (not counted: connections, the
// subscription, the script cache and the scheduler settle in it).
constexpr int kBlocks = 4;
constexpr auto kBlock = 400ms;
constexpr auto kGap = 100ms;            // between blocks: the previous block's stragglers finish
// Exec, connect and warm up before the first block: a base, and a share per
// process started (8 kinds x 16 processes under a loaded machine took more
// than 1.5 s, and a worker that starts late fails, a ring's worker with it).
constexpr auto kStartupAllowance = 1500ms;
constexpr auto kStartupPerProcess = 40ms;

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
  // "ring" / "ring_poll": the token ring (RingLock), the floor of a FIFO
  // hand-over through Redis, with sleeping / polling waiters.
  // "queue_list" / "queue_pub": QueueLock, lockon's shape without its
  // records, waking by list / by pub/sub; "queue_fat": queue_pub doing the
  // server calls lockon's scripts do on the contended path.
  // LOCKON_BENCH_PROCESS_KINDS="spin,lockon,..." runs those kinds only (for
  // experiments; the ratios of kinds left out then read 0).
  std::vector<std::string> kinds{"spin", "lockon", "sleep", "ring", "ring_poll", "queue_list", "queue_pub", "queue_fat"};
  if (const char* chosen = std::getenv("LOCKON_BENCH_PROCESS_KINDS"); chosen != nullptr && *chosen != '\0') {
    kinds.clear();
    std::istringstream list(chosen);
    for (std::string kind; std::getline(list, kind, ',');) kinds.push_back(kind);
  }
  std::vector<KindResult> results(kinds.size());
  for (auto _ : state) {
    results.assign(kinds.size(), KindResult{});
    const std::string tag = "bench:proc:" + std::to_string(processes) + ":" + std::to_string(run++);
    // Alternating schedule: spin block 0, lockon block 0, sleep block 0, spin block 1, ...
    const auto first = Clock::now() + kStartupAllowance + kStartupPerProcess * processes * static_cast<int>(kinds.size());
    std::vector<std::vector<std::string>> blocks(kinds.size());
    for (int b = 0; b <= kBlocks; ++b) {
      for (std::size_t k = 0; k < kinds.size(); ++k) {
        const auto s0 = first + (static_cast<int>(kinds.size()) * b + static_cast<int>(k)) * (kBlock + kGap);
        blocks[k].push_back(std::to_string(ns_of(s0)) + "," + std::to_string(ns_of(s0 + kBlock)));
      }
    }
    const auto spawn_set = [&](const std::string& kind, const std::vector<std::string>& schedule) {
      std::vector<lockon::test::Child> set;
      if (kind.starts_with("ring")) admin.run({"RPUSH", tag + ":" + kind + ":0", "t"});  // the one token
      for (int p = 0; p < processes; ++p) {
        std::string place;  // a ring's worker: its index and the ring's size
        if (kind.starts_with("ring")) place.append(":").append(std::to_string(p)).append(":").append(std::to_string(processes));
        std::vector<std::string> argv{"/proc/self/exe", "--process-worker", kind + place, url, tag + ":" + kind,
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
      // Sampled in the middle of the gaps, not at the block's edges: an
      // INFO at an edge stalled the server under the block's first and
      // last sections, and showed as a 2.5-3.5 ms wait in every kind
      // (docs/benchmarks.md, session 21).
      std::this_thread::sleep_until(start - kGap / 2);
      const auto before = server_usage(admin);
      std::this_thread::sleep_until(start + kBlock + kGap / 2);
      const auto after = server_usage(admin);
      kind.server_cpu_s += after.first - before.first;
      kind.server_calls += after.second - before.second - 1;  // minus our INFO
    }
    for (std::size_t k = 0; k < kinds.size(); ++k)
      collect(sets[k], admin, tag + ":" + kinds[k] + ":counter:", results[k]);
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) report(state, kinds[k] + "_", results[k]);
  state.counters["ring_best_cs_per_s"] =
      std::max(state.counters["ring_cs_per_s"].value, state.counters["ring_poll_cs_per_s"].value);
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
    // The same tail in the cheapest FIFO hand-over and in lockon's sleeping
    // waiters (same run): a stall of the holder or of redis-server shows in
    // every queued waiter of any FIFO lock (docs/benchmarks.md, session 21).
    register_ratio({.label = ways + "token ring (FIFO floor): wait max / wait p50", .subject = subject,
                    .metric = "ring_wait_max_over_p50", .informational = true});
    register_ratio({.label = ways + "lockon, handoff_spin 0: wait max / wait p50", .subject = subject,
                    .metric = "sleep_wait_max_over_p50", .informational = true});
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
    // The floor of any FIFO hand-over through Redis (RingLock), and lockon
    // against it: what is left of the gap that fairness does not explain.
    register_ratio({.label = ways + "token ring (FIFO floor), sleeping waiters / raw spin", .subject = subject,
                    .baseline = subject, .metric = "ring_cs_per_s", .baseline_metric = "spin_cs_per_s",
                    .informational = true});
    register_ratio({.label = ways + "token ring (FIFO floor), polling waiters / raw spin", .subject = subject,
                    .baseline = subject, .metric = "ring_poll_cs_per_s", .baseline_metric = "spin_cs_per_s",
                    .informational = true});
    register_ratio({.label = ways + "FIFO queue script + BLPOP hand-over (no records) / token ring", .subject = subject,
                    .baseline = subject, .metric = "queue_list_cs_per_s", .baseline_metric = "ring_cs_per_s",
                    .informational = true});
    register_ratio({.label = ways + "FIFO queue script + PUBLISH hand-over (no records) / token ring", .subject = subject,
                    .baseline = subject, .metric = "queue_pub_cs_per_s", .baseline_metric = "ring_cs_per_s",
                    .informational = true});
    register_ratio({.label = ways + "the same with lockon's server calls / without", .subject = subject,
                    .baseline = subject, .metric = "queue_fat_cs_per_s", .baseline_metric = "queue_pub_cs_per_s",
                    .informational = true});
    register_ratio({.label = ways + "lockon, handoff_spin 0 / FIFO queue script + PUBLISH with lockon's calls",
                    .subject = subject, .baseline = subject, .metric = "sleep_cs_per_s",
                    .baseline_metric = "queue_fat_cs_per_s", .informational = true});
    register_ratio({.label = ways + "lockon / best token ring", .subject = subject, .baseline = subject,
                    .metric = "lockon_cs_per_s", .baseline_metric = "ring_best_cs_per_s", .informational = true});
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
