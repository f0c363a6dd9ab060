// integration/test_async_lock.cpp — lockon::AsyncLock against a real server:
// the uncontended cycle, sync/async exclusion and hand-over both ways,
// cancellation leaving the queue, timeouts, fencing, lease loss, guards.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <variant>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

class AsyncLockTest : public RedisTest {
 protected:
  long long llen(const std::string& name) {
    return server().command({"LLEN", detail::companion_key(name, "q")}).integer;
  }
  bool exists(const std::string& name) { return server().command({"EXISTS", name}).integer == 1; }
  asio::io_context io;
};

TEST_F(AsyncLockTest, UncontendedCycleSetsAndDeletesTheKey) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name);
    for (int i = 0; i < 3; ++i) {
      co_await lock.async_lock();
      EXPECT_TRUE(lock.held());
      EXPECT_FALSE(lock.lost());
      const auto value = server().command({"GET", name});
      EXPECT_TRUE(is_lock_token(value.str)) << "a 128-bit hex token and the process nonce: " << value.str;
      const auto pttl = server().command({"PTTL", name}).integer;
      EXPECT_GT(pttl, 25'000);
      co_await lock.async_unlock();
      EXPECT_FALSE(lock.held());
      EXPECT_FALSE(exists(name));
      EXPECT_EQ(lock.last_unlock_error(), nullptr);
    }
  }));
}

TEST_F(AsyncLockTest, TryLockIsFalseWhileASyncLockHoldsAndTrueAfter) {
  Client sync_client(server().url());
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  Lock holder(sync_client, name);
  holder.lock();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name);
    EXPECT_FALSE(co_await lock.async_try_lock());
    const auto start = Clock::now();
    EXPECT_FALSE(co_await lock.async_try_lock_for(200ms));
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, 190ms);
    EXPECT_LT(waited, 700ms);
    EXPECT_EQ(llen(name), 0) << "a timed-out waiter left the queue";
    holder.unlock();
    EXPECT_TRUE(co_await lock.async_try_lock());
    co_await lock.async_unlock();
  }));
}

TEST_F(AsyncLockTest, SyncHolderHandsOverToAsyncWaiter) {
  Client sync_client(server().url());
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  Lock holder(sync_client, name, LockOptions{.fencing = true});
  holder.lock();
  const auto sync_fence = holder.fence();
  std::jthread releaser([&] {
    std::this_thread::sleep_for(300ms);
    holder.unlock();
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.fencing = true});
    const auto start = Clock::now();
    co_await lock.async_lock();
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, 250ms);
    // Handed over by the release's message, not found by a poll (250 ms).
    EXPECT_LT(waited, 450ms);
    EXPECT_GT(lock.fence(), sync_fence);
    EXPECT_EQ(llen(name), 0);
    co_await lock.async_unlock();
  }));
  releaser.join();
  EXPECT_FALSE(exists(name));
}

TEST_F(AsyncLockTest, AsyncHolderHandsOverToSyncWaiter) {
  Client sync_client(server().url());
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  std::atomic<bool> sync_acquired{false};
  std::uint64_t sync_fence = 0;
  std::uint64_t async_fence = 0;
  std::promise<void> async_holds;
  std::jthread waiter([&] {
    async_holds.get_future().wait();
    Lock lock(sync_client, name, LockOptions{.fencing = true});
    lock.lock();
    sync_acquired = true;
    sync_fence = lock.fence();
    lock.unlock();
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.fencing = true});
    co_await lock.async_lock();
    async_fence = lock.fence();
    async_holds.set_value();
    // The sync waiter queues behind us and does not get in.
    for (int i = 0; i < 30 && llen(name) == 0; ++i) co_await sleep_for(10ms);
    EXPECT_EQ(llen(name), 1);
    co_await sleep_for(100ms);
    EXPECT_FALSE(sync_acquired.load());
    co_await lock.async_unlock();
  }));
  waiter.join();
  EXPECT_TRUE(sync_acquired.load());
  EXPECT_GT(sync_fence, async_fence);
}

TEST_F(AsyncLockTest, CancelledWaiterLeavesTheQueueAndNeverAcquiresLater) {
  Client sync_client(server().url());
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  Lock holder(sync_client, name);
  holder.lock();
  AsyncLock lock(client, name);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(150ms);
    // Queued behind the holder first, then cancelled by the timer.
    auto winner = co_await (lock.async_lock() || timer.async_wait(asio::use_awaitable));
    EXPECT_EQ(winner.index(), 1u);
    EXPECT_FALSE(lock.held());
    // Cancellation completed after the entry was removed.
    EXPECT_EQ(llen(name), 0);
  }));
  holder.unlock();  // would hand the key to a queued entry
  drain(io, 400ms);
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(exists(name)) << "nobody may hold the key: the cancelled waiter left";
  // And the object is usable again.
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock());
    co_await lock.async_unlock();
  }));
}

TEST_F(AsyncLockTest, ManyCancelledWaitersLeaveNoEntryBehind) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock holder(client, name);
    co_await holder.async_lock();
    auto ex = co_await asio::this_coro::executor;
    int cancelled = 0;
    int finished = 0;
    std::vector<std::unique_ptr<AsyncLock>> locks;
    for (int i = 0; i < 50; ++i) locks.push_back(std::make_unique<AsyncLock>(client, name));
    for (int i = 0; i < 50; ++i) {
      asio::co_spawn(ex, [&, i]() -> asio::awaitable<void> {
        asio::steady_timer timer(ex);
        timer.expires_after(std::chrono::milliseconds(50 + 5 * i));
        auto winner = co_await (locks[static_cast<std::size_t>(i)]->async_lock() || timer.async_wait(asio::use_awaitable));
        if (winner.index() == 1) ++cancelled;
        ++finished;
      }, asio::detached);
    }
    for (int i = 0; i < 300 && finished < 50; ++i) co_await sleep_for(10ms);
    EXPECT_EQ(finished, 50);
    EXPECT_EQ(cancelled, 50);
    EXPECT_EQ(llen(name), 0);
    co_await holder.async_unlock();
    co_await sleep_for(100ms);
    EXPECT_FALSE(exists(name));
    for (auto& lock : locks) EXPECT_FALSE(lock->held());
  }));
}

TEST_F(AsyncLockTest, LockDestroyedDuringAnAcquisitionReleasesWhatItWins) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  AsyncLock holder(client, name);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await holder.async_lock(); }));
  bool completed = false;
  {
    AsyncLock doomed(client, name);
    doomed.async_lock([&](std::exception_ptr) { completed = true; });
    drain(io, 100ms);  // queued behind the holder
  }  // destroyed while its acquisition waits
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await holder.async_unlock(); }));
  drain(io, 300ms);
  EXPECT_TRUE(completed) << "the orphaned acquisition ran to its end";
  EXPECT_FALSE(exists(name)) << "and released what it won";
  EXPECT_EQ(llen(name), 0);
}

TEST_F(AsyncLockTest, CallbackAndFutureTokens) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  AsyncLock lock(client, name);
  bool called = false;
  bool result = false;
  lock.async_try_lock([&](std::exception_ptr error, bool acquired) {
    called = error == nullptr;
    result = acquired;
  });
  io.run_for(2s);
  EXPECT_TRUE(called);
  EXPECT_TRUE(result);
  EXPECT_TRUE(exists(name));
  // use_future: completes while the loop runs on another thread.
  io.restart();
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run_for(5s); });
  auto released = lock.async_unlock(asio::use_future);
  EXPECT_EQ(released.wait_for(3s), std::future_status::ready);
  released.get();
  work.reset();
  io.stop();
  runner.join();
  EXPECT_FALSE(exists(name));
}

TEST_F(AsyncLockTest, FencesIncreaseAcrossAcquisitions) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.fencing = true});
    std::uint64_t last = 0;
    for (int i = 0; i < 5; ++i) {
      co_await lock.async_lock();
      EXPECT_GT(lock.fence(), last);
      last = lock.fence();
      co_await lock.async_unlock();
    }
    // Counter gone (restart without persistence): still above the clock floor.
    server().command({"DEL", detail::companion_key(name, "fence")});
    co_await lock.async_lock();
    EXPECT_GT(lock.fence(), last);
    co_await lock.async_unlock();
  }));
}

TEST_F(AsyncLockTest, RenewalKeepsTheLeaseAndLossIsSignalled) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  std::atomic<int> losses{0};
  LossReason reason{};
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.ttl = 300ms, .on_lost = [&](const LossEvent& event) {
                                               reason = event.reason;
                                               ++losses;
                                             }});
    co_await lock.async_lock();
    co_await sleep_for(700ms);  // more than two ttls: renewed meanwhile
    EXPECT_TRUE(exists(name));
    EXPECT_FALSE(lock.lost());
    server().command({"SET", name, "someone-else"});
    for (int i = 0; i < 60 && !lock.lost(); ++i) co_await sleep_for(10ms);
    EXPECT_TRUE(lock.lost());
    EXPECT_TRUE(lock.lost_token().stop_requested());
    EXPECT_EQ(losses.load(), 1);
    EXPECT_EQ(reason, LossReason::taken);
    co_await lock.async_unlock();  // never fails; records why
    EXPECT_NE(lock.last_unlock_error(), nullptr);
    EXPECT_EQ(server().command({"GET", name}).str, "someone-else");
  }));
}

TEST_F(AsyncLockTest, ExtendAddsTime) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.ttl = 10s, .auto_renew = false});
    co_await lock.async_lock();
    co_await lock.async_extend(20s);
    EXPECT_GT(server().command({"PTTL", name}).integer, 25'000);
    co_await lock.async_extend(5s, true);
    EXPECT_LE(server().command({"PTTL", name}).integer, 5'000);
    co_await lock.async_unlock();
    bool threw = false;
    try {
      co_await lock.async_extend(1s);
    } catch (const LockError&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
  }));
}

TEST_F(AsyncLockTest, ScopedGuardReleasesExplicitlyOrOnDestruction) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  AsyncLock lock(client, name);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    {
      auto guard = co_await async_scoped(lock);
      EXPECT_TRUE(exists(name));
      co_await guard.release();
      EXPECT_FALSE(exists(name));
    }
    {
      auto guard = co_await async_scoped(lock, 1s);
      EXPECT_TRUE(exists(name));
    }  // destroyed while holding: a detached unlock
    co_await sleep_for(100ms);
    EXPECT_FALSE(exists(name));
    EXPECT_FALSE(lock.held());
  }));
}

TEST_F(AsyncLockTest, ScopedWithTimeoutThrowsAcquireTimeout) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock holder(client, name);
    AsyncLock other(client, name);
    co_await holder.async_lock();
    bool threw = false;
    try {
      auto guard = co_await async_scoped(other, 100ms);
    } catch (const AcquireTimeout&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    co_await holder.async_unlock();
  }));
}

TEST_F(AsyncLockTest, CommandsAndErrors) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("k");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> set{"SET", name, "v"};
    std::vector<std::string> get{"GET", name};
    std::vector<std::string> lpush{"LPUSH", name, "x"};
    co_await client.async_command(set);
    const Reply reply = co_await client.async_command(get);
    EXPECT_EQ(reply.as_string(), "v");
    bool threw = false;
    try {
      co_await client.async_command(lpush);
    } catch (const WrongTypeError&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
    // A lock on a key of another type fails typed, as the sync Lock does.
    AsyncLock lock(client, name);
    threw = false;
    server().command({"DEL", name});
    server().command({"LPUSH", name, "x"});
    try {
      co_await lock.async_lock();
    } catch (const WrongTypeError&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
  }));
}

TEST_F(AsyncLockTest, RefusedConnectionIsAConnectError) {
  AsyncClient client(io.get_executor(), "redis://127.0.0.1:1?connect_timeout=500ms");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, key("lock"));
    bool threw = false;
    try {
      co_await lock.async_lock();
    } catch (const ConnectError&) {
      threw = true;
    }
    EXPECT_TRUE(threw);
  }));
}

}  // namespace
}  // namespace lockon::test
