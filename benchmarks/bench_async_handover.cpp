// Contended hand-over, async against sync, baseline in the same run
// (alternating blocks): two contenders on one key, each locking and
// unlocking in a loop, so nearly every acquisition is a FIFO hand-over from
// the other. Sync: two threads with their own Lock over one Client. Async:
// two coroutines with their own AsyncLock over one AsyncClient on one
// io_context thread. Reported: hand-over cycles per second of each, and
// their ratio. The async subscriber's channel lingers between turns
// (client/channel_rules.hpp): without that each turn paid an UNSUBSCRIBE
// and a SUBSCRIBE, and waited for the confirmation.
#include <benchmark/benchmark.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "bench_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lock.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void BM_AsyncHandOverVsSync(benchmark::State& state) {
  constexpr int kRounds = 10;
  constexpr int kCycles = 150;  // per contender per block
  const std::string url = lockon::bench::server_url();
  const lockon::LockOptions options{.ttl = std::chrono::seconds(10)};
  lockon::Client sync_client(url);
  lockon::Lock sync_a(sync_client, "bench:handover:sync", options);
  lockon::Lock sync_b(sync_client, "bench:handover:sync", options);
  asio::io_context io;
  lockon::AsyncClient client(io.get_executor(), url);
  lockon::AsyncLock async_a(client, "bench:handover:async", options);
  lockon::AsyncLock async_b(client, "bench:handover:async", options);
  double sync_seconds = 0;
  double async_seconds = 0;
  long long cycles = 0;
  std::atomic<bool> failed{false};
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      auto start = Clock::now();
      {
        const auto contend = [&](lockon::Lock& lock) {
          for (int i = 0; i < kCycles; ++i) {
            if (!lock.try_lock_for(std::chrono::seconds(5))) failed = true;
            else lock.unlock();
          }
        };
        std::thread other([&] { contend(sync_b); });
        contend(sync_a);
        other.join();
      }
      sync_seconds += seconds_since(start);
      start = Clock::now();
      std::exception_ptr error;
      int done = 0;
      io.restart();
      for (lockon::AsyncLock* lock : {&async_a, &async_b}) {
        asio::co_spawn(io, [&, lock]() -> asio::awaitable<void> {
          for (int i = 0; i < kCycles; ++i) {
            const bool got = co_await lock->async_try_lock_for(std::chrono::seconds(5));
            if (!got) failed = true;
            else co_await lock->async_unlock();
          }
        }, [&](std::exception_ptr e) {
          if (e) error = e;
          if (++done == 2) io.stop();
        });
      }
      io.run();
      if (error) std::rethrow_exception(error);
      async_seconds += seconds_since(start);
      cycles += 2 * kCycles;
    }
  }
  if (failed) state.SkipWithError("a contender timed out");
  state.counters["sync_cycles_per_s"] = static_cast<double>(cycles) / sync_seconds;
  state.counters["async_cycles_per_s"] = static_cast<double>(cycles) / async_seconds;
  state.counters["ratio_async_over_sync"] = sync_seconds / async_seconds;
}

}  // namespace

BENCHMARK(BM_AsyncHandOverVsSync)->UseRealTime()->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(true);

namespace {
const bool registered = [] {
  lockon::bench::register_ratio({.label = "contended hand-over, 2 contenders: async / sync (cycles/s)",
                                 .subject = "BM_AsyncHandOverVsSync",
                                 .metric = "ratio_async_over_sync",
                                 .informational = true});
  return true;
}();
}  // namespace
