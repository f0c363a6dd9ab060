// ReadWriteLock and Semaphore (issue 16).
//
// BM_SharedCycles: the uncontended cycle of each primitive against the raw
// floor (SET NX PX + EVALSHA compare-and-delete on one hiredis context) and
// the Lock, in alternating blocks inside one measurement (drift-proof, as
// bench_alternating.cpp). Reported, no target: a share's cycle is two Lua
// scripts (a ZSET of leases, the queue checked) where the floor needs no
// script to acquire.
//
// BM_ReadersAndWriter: 8 reader threads + 1 writer thread for a fixed window
// on a ReadWriteLock, against the same workload on a plain Lock (every
// thread then takes the lock exclusively), in alternating 400 ms blocks.
// Workload per critical section: one GET (the writer: INCR) and a 200 µs
// sleep; readers loop back at once, the writer thinks 5 ms (outside the
// lock) between writes (/5): a read-mostly load, the case a read-write lock
// is for. The ratio of critical sections per second must be >= 3: readers
// run together. Reported without a target (/0): a writer that loops back at
// once; writer preference then makes the load alternate between one write
// and one batch of reads.
//
// BM_SemaphoreQueueingScan: what a waiter costs the server when it joins the
// queue of a semaphore full of other processes' shares. Joining, the script
// scans up to 1,024 holders for shares of the waiter's own process
// (shared_scripts.cpp, same_process in common/token.hpp). Two semaphores,
// one full with 1 permit and one full with 1,024 (members written directly,
// as another process's), in alternating blocks of waits that give up after
// 1 ms: the server's script time per wait (INFO commandstats) on each, and
// their difference, the scan. Reported, no target.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/lockon.hpp"

namespace {

using namespace std::chrono_literals;


void BM_SharedCycles(benchmark::State& state) {
  constexpr int kBlock = 200;
  constexpr int kRounds = 20;
  const std::string url = lockon::bench::server_url();
  lockon::bench::RawFloor floor(url, "bench:shared:floor");

  const lockon::Client client(url);
  lockon::Lock lock(client, "bench:shared:lock");
  lockon::ReadWriteLock rw(client, "bench:shared:rw");
  lockon::Semaphore semaphore(client, "bench:shared:sem", 4);

  std::vector<lockon::bench::CycleVariant> variants{
      {"floor", [&] { floor.cycle(); }},
      {"lock",
       [&] {
         if (!lock.try_lock()) throw std::runtime_error("lock busy");
         lock.unlock();
       }},
      {"rw_write",
       [&] {
         if (!rw.try_lock()) throw std::runtime_error("rw busy");
         rw.unlock();
       }},
      {"rw_read",
       [&] {
         if (!rw.try_lock_shared()) throw std::runtime_error("rw busy");
         rw.unlock_shared();
       }},
      {"semaphore",
       [&] {
         if (!semaphore.try_acquire()) throw std::runtime_error("semaphore busy");
         semaphore.release();
       }},
  };
  lockon::bench::run_alternating_blocks(state, variants, kRounds, kBlock);
}

// Runs the workload for `window` and returns the critical sections done.
long long run_window(const lockon::Client& client, const lockon::Client& data, bool read_write,
                     std::chrono::milliseconds window, std::chrono::milliseconds writer_think, long long& writes) {
  constexpr int kReaders = 8;
  const std::string name = read_write ? "bench:rw8:rw" : "bench:rw8:lock";
  std::atomic<bool> stop{false};
  std::atomic<long long> reads_done{0}, writes_done{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  const auto critical_section = [&](bool writer) {
    if (writer) data.command({"INCR", "bench:rw8:value"});
    else data.command({"GET", "bench:rw8:value"});
    std::this_thread::sleep_for(200us);
  };
  for (int i = 0; i <= kReaders; ++i) {
    const bool writer = i == kReaders;
    threads.emplace_back([&, writer] {
      try {
        if (read_write) {
          lockon::ReadWriteLock lock(client, name);
          while (!stop.load()) {
            if (writer) {
              if (!lock.try_lock_for(5s)) continue;
              critical_section(true);
              lock.unlock();
              std::this_thread::sleep_for(writer_think);
            } else {
              if (!lock.try_lock_shared_for(5s)) continue;
              critical_section(false);
              lock.unlock_shared();
            }
            ++(writer ? writes_done : reads_done);
          }
        } else {
          lockon::Lock lock(client, name);
          while (!stop.load()) {
            if (!lock.try_lock_for(5s)) continue;
            critical_section(writer);
            lock.unlock();
            if (writer) std::this_thread::sleep_for(writer_think);
            ++(writer ? writes_done : reads_done);
          }
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  std::this_thread::sleep_for(window);
  stop = true;
  for (auto& thread : threads) thread.join();
  if (failures.load() != 0) throw std::runtime_error("a benchmark thread failed");
  writes += writes_done.load();
  return reads_done.load() + writes_done.load();
}

void BM_ReadersAndWriter(benchmark::State& state) {
  // Short alternating blocks: a machine shared with other jobs slows both
  // variants alike.
  constexpr int kRounds = 8;
  constexpr auto kWindow = 400ms;
  const lockon::Client client(lockon::bench::server_url(), lockon::PoolOptions{.size = 24});
  const lockon::Client data(lockon::bench::server_url(), lockon::PoolOptions{.size = 24});
  const std::chrono::milliseconds think(state.range(0));
  long long rw_ops = 0, lock_ops = 0, rw_writes = 0, lock_writes = 0;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      rw_ops += run_window(client, data, true, kWindow, think, rw_writes);
      lock_ops += run_window(client, data, false, kWindow, think, lock_writes);
    }
  }
  const double seconds = kRounds * std::chrono::duration<double>(kWindow).count();
  state.counters["rw_sections_per_s"] = static_cast<double>(rw_ops) / seconds;
  state.counters["lock_sections_per_s"] = static_cast<double>(lock_ops) / seconds;
  state.counters["rw_writes_per_s"] = static_cast<double>(rw_writes) / seconds;
  state.counters["lock_writes_per_s"] = static_cast<double>(lock_writes) / seconds;
  state.counters["ratio_rw_vs_lock"] = lock_ops > 0 ? static_cast<double>(rw_ops) / static_cast<double>(lock_ops) : 0;
}

// The server's time in scripts so far, in µs (EVALSHA and EVAL).
long long script_usec(redisContext* context) {
  auto* reply = static_cast<redisReply*>(redisCommand(context, "INFO commandstats"));
  if (reply == nullptr || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("INFO commandstats failed");
  const std::string info(reply->str, reply->len);
  freeReplyObject(reply);
  long long total = 0;
  for (const char* command : {"cmdstat_evalsha:", "cmdstat_eval:"}) {
    const auto at = info.find(command);
    if (at == std::string::npos) continue;
    const auto usec = info.find("usec=", at);
    total += std::stoll(info.substr(usec + 5));
  }
  return total;
}

void BM_SemaphoreQueueingScan(benchmark::State& state) {
  constexpr int kRounds = 10;
  constexpr int kBlock = 40;
  constexpr int kMany = 1024;
  const std::string url = lockon::bench::server_url();
  const auto options = lockon::ConnectionOptions::from_url(url);
  std::unique_ptr<redisContext, decltype(&redisFree)> raw(redisConnect(options.host.c_str(), options.port),
                                                          &redisFree);
  if (!raw || raw->err) throw std::runtime_error("cannot connect to " + url);
  const lockon::Client client(url);
  struct Full {
    std::string name;
    int permits;
    long long usec = 0;
    long long waits = 0;
  };
  std::vector<Full> semaphores{{"bench:scan:one", 1}, {"bench:scan:many", kMany}};
  for (const auto& full : semaphores) {
    const std::string holders = lockon::detail::companion_key(full.name, "sh");
    freeReplyObject(redisCommand(raw.get(), "DEL %s", holders.c_str()));
    for (int i = 0; i < full.permits; ++i) {
      // Another process's share: its own nonce, a far end (never lapses).
      char member[64];
      std::snprintf(member, sizeof member, "p:%032x.%012x", i + 1, 0xbe11c0de);
      freeReplyObject(redisCommand(raw.get(), "ZADD %s 99999999999999 %s", holders.c_str(), member));
    }
  }
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      for (auto& full : semaphores) {
        lockon::Semaphore semaphore(client, full.name, full.permits);
        const long long before = script_usec(raw.get());
        for (int i = 0; i < kBlock; ++i)
          if (semaphore.try_acquire_for(1ms)) throw std::runtime_error("a full semaphore granted a permit");
        full.usec += script_usec(raw.get()) - before;
        full.waits += kBlock;
      }
    }
  }
  for (const auto& full : semaphores)
    freeReplyObject(redisCommand(raw.get(), "DEL %s", lockon::detail::companion_key(full.name, "sh").c_str()));
  const double one = static_cast<double>(semaphores[0].usec) / static_cast<double>(semaphores[0].waits);
  const double many = static_cast<double>(semaphores[1].usec) / static_cast<double>(semaphores[1].waits);
  state.counters["server_us_per_wait_1_holder"] = one;
  state.counters["server_us_per_wait_1024_holders"] = many;
  state.counters["scan_us"] = many - one;
}

BENCHMARK(BM_SharedCycles)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);
BENCHMARK(BM_ReadersAndWriter)->Arg(5)->Arg(0)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);
BENCHMARK(BM_SemaphoreQueueingScan)->Iterations(1)->Repetitions(3)->UseRealTime()->ReportAggregatesOnly(true);

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "alternating blocks: ReadWriteLock write cycle / raw floor (cycles/s)",
                  .subject = "BM_SharedCycles", .metric = "ratio_rw_write", .informational = true});
  register_ratio({.label = "alternating blocks: ReadWriteLock read cycle / raw floor (cycles/s)",
                  .subject = "BM_SharedCycles", .metric = "ratio_rw_read", .informational = true});
  register_ratio({.label = "alternating blocks: Semaphore cycle / raw floor (cycles/s)",
                  .subject = "BM_SharedCycles", .metric = "ratio_semaphore", .informational = true});
  register_ratio({.label = "alternating blocks: Lock / raw floor (cycles/s), same run",
                  .subject = "BM_SharedCycles", .metric = "ratio_lock", .informational = true});
  register_ratio({.label = "8 readers + 1 writer (5 ms think): ReadWriteLock / plain Lock (critical sections/s)",
                  .subject = "BM_ReadersAndWriter/5", .metric = "ratio_rw_vs_lock", .target = 3.0});
  register_ratio({.label = "8 readers + 1 writer (no think): ReadWriteLock / plain Lock (critical sections/s)",
                  .subject = "BM_ReadersAndWriter/0", .metric = "ratio_rw_vs_lock", .informational = true});
  return true;
}();

}  // namespace
