// The async component against the synchronous floor, baseline in the same
// run (alternating blocks, so machine drift hits both alike):
//   - the uncontended cycle: AsyncLock try_lock/unlock on one io_context
//     thread vs Lock try_lock/unlock (target: async >= 0.9 x sync);
//   - 64 coroutines cycling on 64 distinct keys over the one pipelined
//     connection vs one thread cycling over one synchronous connection
//     (target: >= 3 x);
//   - memory per waiting coroutine (10,000 coroutines queued on held keys;
//     heap in use, mallinfo2), reported.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lock.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRounds = 20;

// Runs `make()` on `io` until it completes (background work stays queued).
template <class Make>
void run(asio::io_context& io, Make&& make) {
  std::exception_ptr error;
  io.restart();
  asio::co_spawn(io, std::forward<Make>(make)(), [&](std::exception_ptr e) {
    error = e;
    io.stop();
  });
  io.run();
  if (error) std::rethrow_exception(error);
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void BM_AsyncCycleVsSync(benchmark::State& state) {
  constexpr int kBlock = 300;
  const std::string url = lockon::bench::server_url();
  lockon::Client sync_client(url);
  lockon::Lock sync_lock(sync_client, "bench:async:sync");
  asio::io_context io;
  lockon::AsyncClient client(io.get_executor(), url);
  lockon::AsyncLock async_lock(client, "bench:async:async");
  double sync_seconds = 0;
  double async_seconds = 0;
  long long cycles = 0;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kBlock; ++i) {
        if (!sync_lock.try_lock()) state.SkipWithError("sync lock busy");
        sync_lock.unlock();
      }
      sync_seconds += seconds_since(start);
      start = Clock::now();
      run(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < kBlock; ++i) {
          const bool got = co_await async_lock.async_try_lock();
          if (!got) state.SkipWithError("async lock busy");
          co_await async_lock.async_unlock();
        }
      });
      async_seconds += seconds_since(start);
      cycles += kBlock;
    }
  }
  state.counters["sync_cycles_per_s"] = static_cast<double>(cycles) / sync_seconds;
  state.counters["async_cycles_per_s"] = static_cast<double>(cycles) / async_seconds;
  state.counters["ratio_async_over_sync"] = sync_seconds / async_seconds;
}

void BM_Async64KeysPipelinedVsSyncConnection(benchmark::State& state) {
  constexpr int kCoroutines = 64;
  constexpr int kBlockCycles = 20;  // per coroutine per block
  constexpr int kSyncBlock = 300;
  const std::string url = lockon::bench::server_url();
  lockon::Client sync_client(url, lockon::PoolOptions{.size = 1});
  lockon::Lock sync_lock(sync_client, "bench:async64:sync");
  asio::io_context io;
  lockon::AsyncClient client(io.get_executor(), url);
  std::vector<std::unique_ptr<lockon::AsyncLock>> locks;
  for (int i = 0; i < kCoroutines; ++i)
    locks.push_back(std::make_unique<lockon::AsyncLock>(client, "bench:async64:" + std::to_string(i)));
  double sync_seconds = 0;
  double async_seconds = 0;
  long long sync_cycles = 0;
  long long async_cycles = 0;
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      auto start = Clock::now();
      for (int i = 0; i < kSyncBlock; ++i) {
        if (!sync_lock.try_lock()) state.SkipWithError("sync lock busy");
        sync_lock.unlock();
      }
      sync_seconds += seconds_since(start);
      sync_cycles += kSyncBlock;
      start = Clock::now();
      run(io, [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        int done = 0;
        asio::steady_timer all_done(ex, Clock::time_point::max());
        for (int c = 0; c < kCoroutines; ++c) {
          asio::co_spawn(ex, [&, c]() -> asio::awaitable<void> {
            auto& lock = *locks[static_cast<std::size_t>(c)];
            for (int i = 0; i < kBlockCycles; ++i) {
              const bool got = co_await lock.async_try_lock();
              if (!got) state.SkipWithError("async lock busy");
              co_await lock.async_unlock();
            }
            if (++done == kCoroutines) all_done.cancel();
          }, asio::detached);
        }
        co_await all_done.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      });
      async_seconds += seconds_since(start);
      async_cycles += kCoroutines * kBlockCycles;
    }
  }
  state.counters["sync_cycles_per_s"] = static_cast<double>(sync_cycles) / sync_seconds;
  state.counters["async_cycles_per_s"] = static_cast<double>(async_cycles) / async_seconds;
  state.counters["ratio_async_over_sync"] =
      (static_cast<double>(async_cycles) / async_seconds) / (static_cast<double>(sync_cycles) / sync_seconds);
}

void BM_AsyncMemoryPerWaiter(benchmark::State& state) {
  constexpr int kWaiters = 10'000;
  constexpr int kKeys = 100;
  const std::string url = lockon::bench::server_url();
  asio::io_context io;
  lockon::AsyncClient client(io.get_executor(), url);
  double per_waiter = 0;
  for (auto _ : state) {
    std::vector<std::unique_ptr<lockon::AsyncLock>> holders;
    run(io, [&]() -> asio::awaitable<void> {
      for (int k = 0; k < kKeys; ++k) {
        holders.push_back(std::make_unique<lockon::AsyncLock>(client, "bench:mem:" + std::to_string(k)));
        co_await holders.back()->async_lock();
      }
    });
    const std::size_t before = mallinfo2().uordblks;
    int queued = 0;
    std::vector<std::unique_ptr<lockon::AsyncLock>> waiters;
    run(io, [&]() -> asio::awaitable<void> {
      auto ex = co_await asio::this_coro::executor;
      for (int i = 0; i < kWaiters; ++i) {
        waiters.push_back(std::make_unique<lockon::AsyncLock>(client, "bench:mem:" + std::to_string(i % kKeys)));
        asio::co_spawn(ex, waiters.back()->async_try_lock_for(std::chrono::seconds(30)), [&](std::exception_ptr, bool) {});
      }
      // Until every waiter is queued on the server (its attempt answered).
      asio::steady_timer timer(ex);
      // (A braced list inside co_await miscompiles with GCC 12.)
      std::vector<std::string> count_queued{
          "EVAL", "local n = 0 for i = 0, 99 do n = n + redis.call('LLEN', '{bench:mem:' .. i .. '}:q') end return n",
          "0"};
      for (int i = 0; i < 500; ++i) {
        const auto total = co_await client.async_command(count_queued);
        queued = static_cast<int>(total.as_integer());
        if (queued >= kWaiters) break;
        timer.expires_after(std::chrono::milliseconds(10));
        co_await timer.async_wait(asio::use_awaitable);
      }
    });
    const std::size_t after = mallinfo2().uordblks;
    per_waiter = (static_cast<double>(after) - static_cast<double>(before)) / kWaiters;
    if (queued < kWaiters) state.SkipWithError("not every waiter queued");
    // Release: the holders hand over down each queue; let it all finish.
    run(io, [&]() -> asio::awaitable<void> {
      for (auto& holder : holders) co_await holder->async_unlock();
      asio::steady_timer timer(co_await asio::this_coro::executor);
      for (int i = 0; i < 3000; ++i) {
        bool any = false;
        for (auto& waiter : waiters) any = any || waiter->held();
        std::vector<std::string> count{"EXISTS"};
        for (int k = 0; k < kKeys; ++k) count.push_back("bench:mem:" + std::to_string(k));
        if (any) {
          for (auto& waiter : waiters)
            if (waiter->held()) co_await waiter->async_unlock();
        }
        const auto left = co_await client.async_command(count);
        if (left.as_integer() == 0 && !any) break;
        timer.expires_after(std::chrono::milliseconds(5));
        co_await timer.async_wait(asio::use_awaitable);
      }
    });
  }
  state.counters["bytes_per_waiting_coroutine"] = per_waiter;
}

BENCHMARK(BM_AsyncCycleVsSync)->UseRealTime()->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_Async64KeysPipelinedVsSyncConnection)->UseRealTime()->Iterations(1)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_AsyncMemoryPerWaiter)->UseRealTime()->Iterations(1);

const bool registered = [] {
  using lockon::bench::register_ratio;
  register_ratio({.label = "async uncontended cycle / sync cycle (alternating blocks)",
                  .subject = "BM_AsyncCycleVsSync", .metric = "ratio_async_over_sync", .target = 0.9});
  register_ratio({.label = "64 coroutines, 64 keys, one connection / sync single connection (cycles/s)",
                  .subject = "BM_Async64KeysPipelinedVsSyncConnection", .metric = "ratio_async_over_sync",
                  .target = 3.0});
  register_ratio({.label = "heap bytes per waiting coroutine (10,000 waiters)", .subject = "BM_AsyncMemoryPerWaiter",
                  .metric = "bytes_per_waiting_coroutine", .informational = true});
  return true;
}();

}  // namespace
