// integration/test_async_lock_on.cpp — AsyncLocker::async_lock_on: the same
// keys as RedisLocker::lock_on (sync and async calls exclude each other),
// the policy's errors, LockContext injection, LockLost, exceptions.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/locker.hpp"
#include "lockon/metrics.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

class AsyncLockOnTest : public RedisTest {
 protected:
  asio::io_context io;
};

TEST_F(AsyncLockOnTest, SameKeyAsSyncLockOnAndResultsPassThrough) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string prefix = key("p");
  AsyncLocker locker(client, {.key_prefix = prefix});
  RedisLocker sync_locker(server().url(), {.key_prefix = prefix});
  std::string seen_key;
  auto withdraw = locker.async_lock_on<0>(
      "bank::withdraw", [&](AsyncLockContext& context, std::string card, int amount) -> asio::awaitable<int> {
        seen_key = context.key();
        EXPECT_EQ(server().command({"EXISTS", context.key()}).integer, 1);
        EXPECT_EQ(context.attempts(), 1);
        co_return static_cast<int>(card.size()) * 1000 - amount;
      });
  auto sync_withdraw = sync_locker.lock_on<0>("bank::withdraw", [](std::string, int) { return 0; });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    const int balance = co_await withdraw(std::string("card-1"), 100);
    EXPECT_EQ(balance, 6 * 1000 - 100);
  }));
  EXPECT_EQ(seen_key, sync_withdraw.key_for("card-1", 1));
  EXPECT_EQ(seen_key, withdraw.key_for(std::string("card-1"), 1));
  EXPECT_EQ(server().command({"EXISTS", seen_key}).integer, 0) << "released";
}

TEST_F(AsyncLockOnTest, ReentrantIsRefusedNotSilentlyIgnored) {
  AsyncClient client(io.get_executor(), server().url());
  AsyncLocker locker(client, {.key_prefix = key("p")});
  LockOnOptions options;
  options.reentrant = true;
  const auto wrap = [&] {
    return locker.async_lock_on<0>("reentrant::fn", [](std::string) -> asio::awaitable<void> { co_return; }, options);
  };
  EXPECT_THROW(wrap(), ConfigError);
  options.reentrant = false;
  EXPECT_NO_THROW(wrap());
}

TEST_F(AsyncLockOnTest, SyncAndAsyncCallsExcludeEachOther) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string prefix = key("p");
  AsyncLocker locker(client, {.timeout = 20s, .key_prefix = prefix});
  RedisLocker sync_locker(server().url(), {.timeout = 20s, .key_prefix = prefix});
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> calls{0};
  auto sync_fn = sync_locker.lock_on<0>("shared", [&](int) {
    if (++inside > 1) ++overlaps;
    std::this_thread::sleep_for(2ms);
    --inside;
    ++calls;
  });
  auto async_fn = locker.async_lock_on<0>("shared", [&](int) -> asio::awaitable<void> {
    if (++inside > 1) ++overlaps;
    co_await sleep_for(2ms);
    --inside;
    ++calls;
  });
  std::jthread sync_thread([&] {
    for (int i = 0; i < 50; ++i) sync_fn(7);
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 50; ++i) co_await async_fn(7);
  }));
  sync_thread.join();
  EXPECT_EQ(calls.load(), 100);
  EXPECT_EQ(overlaps.load(), 0);
}

TEST_F(AsyncLockOnTest, BusyLockGivesAcquireTimeoutOrRetriesExhausted) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string prefix = key("p");
  AsyncLocker by_timeout(client, {.max_retry = 0, .retry_delay = 50ms, .timeout = 200ms, .key_prefix = prefix});
  AsyncLocker by_retries(client, {.max_retry = 2, .retry_delay = 50ms, .timeout = 5s, .key_prefix = prefix});
  auto body = [](int) -> asio::awaitable<int> { co_return 1; };
  auto f1 = by_timeout.async_lock_on<0>("busy", body);
  auto f2 = by_retries.async_lock_on<0>("busy", body);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock holder(client, f1.key_for(1));
    co_await holder.async_lock();
    bool timeout = false;
    bool exhausted = false;
    const auto start = Clock::now();
    try {
      co_await f1(1);
    } catch (const AcquireTimeout&) {
      timeout = true;
    }
    EXPECT_TRUE(timeout);
    EXPECT_LT(Clock::now() - start, 600ms);
    try {
      co_await f2(1);
    } catch (const RetriesExhausted&) {
      exhausted = true;
    }
    EXPECT_TRUE(exhausted);
    co_await holder.async_unlock();
    EXPECT_EQ(co_await f2(1), 1);
  }));
}

TEST_F(AsyncLockOnTest, ExceptionsPropagateAfterReleaseAndLostLeaseThrowsLockLost) {
  AsyncClient client(io.get_executor(), server().url());
  AsyncLocker locker(client, {.ttl = 300ms, .key_prefix = key("p")});
  std::string used_key;
  auto failing = locker.async_lock_on<0>("f", [&](AsyncLockContext& context, int) -> asio::awaitable<int> {
    used_key = context.key();
    throw std::runtime_error("boom");
    co_return 0;
  });
  auto losing = locker.async_lock_on<0>("g", [&](AsyncLockContext& context, int) -> asio::awaitable<int> {
    server().command({"DEL", context.key()});
    server().command({"SET", context.key(), "thief"});
    for (int i = 0; i < 100 && !context.lost(); ++i) co_await sleep_for(10ms);
    EXPECT_TRUE(context.lost());
    co_return 5;
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    bool threw = false;
    try {
      co_await failing(1);
    } catch (const std::runtime_error& e) {
      threw = std::string(e.what()) == "boom";
    }
    EXPECT_TRUE(threw);
    EXPECT_EQ(server().command({"EXISTS", used_key}).integer, 0);
    bool lost = false;
    try {
      co_await losing(1);
    } catch (const LockLost&) {
      lost = true;
    }
    EXPECT_TRUE(lost);
  }));
}

// Issue 36, D6: async_lock_on calls never appeared in the metrics; they are
// counted in the same registry as lock_on's, under the function's name.
TEST_F(AsyncLockOnTest, CallsAreCountedInTheMetricsLikeLockOnCalls) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string function = key("async-metrics");
  AsyncLocker locker(client, {.max_retry = 1, .retry_delay = 0ms, .timeout = 0ms});
  auto body = [](int) -> asio::awaitable<int> { co_return 1; };
  auto counted = locker.async_lock_on<0>(function, body);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_EQ(co_await counted(1), 1);
    EXPECT_EQ(co_await counted(2), 1);
    AsyncLock holder(client, counted.key_for(3));
    co_await holder.async_lock();
    try {
      co_await counted(3);
      ADD_FAILURE() << "the lock was held";
    } catch (const RetriesExhausted&) {
    }
    co_await holder.async_unlock();
    // The held gauge (issue 35 §11) counts a call while its body runs.
    auto inside = locker.async_lock_on<0>(function, [&](int) -> asio::awaitable<int> {
      for (const FunctionMetrics& m : metrics_snapshot())
        if (m.function == function) co_return static_cast<int>(m.held);
      co_return -1;
    });
    EXPECT_EQ(co_await inside(4), 1);
  }));
  bool found = false;
  for (const FunctionMetrics& m : metrics_snapshot()) {
    if (m.function != function) continue;
    found = true;
    EXPECT_EQ(m.acquisitions, 3u);
    EXPECT_EQ(m.busy, 1u);
    EXPECT_EQ(m.errors, 0u);
    EXPECT_EQ(m.hold.count, 3u) << "each call that held the lock";
    EXPECT_EQ(m.held, 0u) << "none holds now";
  }
  EXPECT_TRUE(found) << prometheus_text();
}

// The held gauge of a call its caller cancels while the body runs (the
// frame is destroyed mid-call): the release is recorded all the same, so
// the gauge does not keep a call that is gone (review of issue 35 §11).
TEST_F(AsyncLockOnTest, ACancelledCallLeavesTheHeldGauge) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string function = key("async-held-cancelled");
  AsyncLocker locker(client, {.max_retry = 1, .retry_delay = 0ms, .timeout = 0ms});
  std::atomic<bool> inside{false};
  auto slow = locker.async_lock_on<0>(function, [&](int) -> asio::awaitable<int> {
    inside = true;
    asio::steady_timer long_wait(co_await asio::this_coro::executor, 30s);
    co_await long_wait.async_wait(asio::use_awaitable);
    co_return 1;
  });
  const auto held_now = [&]() -> long long {
    for (const FunctionMetrics& m : metrics_snapshot())
      if (m.function == function) return static_cast<long long>(m.held);
    return -1;
  };
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer cancel_after(co_await asio::this_coro::executor, 300ms);
    const auto winner = co_await (slow(1) || cancel_after.async_wait(asio::use_awaitable));
    EXPECT_EQ(winner.index(), 1u) << "the timer ends the call";
  }));
  ASSERT_TRUE(inside.load()) << "the call never ran its body: the cancellation proved nothing";
  EXPECT_EQ(held_now(), 0) << "a cancelled call stays counted as holding";
}

}  // namespace
}  // namespace lockon::test
