// integration/test_async_cancel_after_grant.cpp — AsyncLock: a cancellation
// that lands after the fast path's SET was answered (granted) but before
// the acquiring coroutine resumed. The coroutine's next co_await throws
// operation_aborted; the caller is told the acquisition was cancelled, so
// the key must not stay held by its token for the whole lease (found by
// review, session 17: nothing passed the grant on).
//
// The window is made deterministic on the single io thread: a handler
// blocks it while the (proxy-delayed) reply arrives and the cancelling
// timer expires; both are then run in one reactor pass, the reply first.
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

class AsyncCancelAfterGrant : public RedisTest, public ::testing::WithParamInterface<bool> {
 protected:
  // Delays the fast path's request 100 ms: SET NX, or (fenced) the
  // fenced_acquire script's EVALSHA (until session 18 this matched MULTI,
  // which the fenced path no longer sends since a73a68a: its rounds were
  // not delayed at all, found by review).
  static int delay_the_acquisition(FaultProxy& proxy, bool fenced) {
    return proxy.add_rule({.command = fenced ? "EVALSHA" : "SET",
                           .argument_contains = fenced ? detail::scripts::fenced_acquire().sha() : "NX",
                           .action = FaultAction::delay, .delay = 100ms, .times = 1});
  }
};

TEST_P(AsyncCancelAfterGrant, ACancelledAcquisitionThatWasGrantedLeavesTheKeyFree) {
  const bool fenced = GetParam();
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock warm(client, key("warm"), LockOptions{.ttl = 5s, .fencing = fenced});  // connected, scripts loaded
    co_await warm.async_lock();
    co_await warm.async_unlock();
  }));
  int cancelled = 0, acquired = 0, leaked = 0;
  for (int round = 0; round < 8; ++round) {
    const std::string name = key("lock-" + std::to_string(round));
    if (fenced) server().command({"SET", detail::companion_key(name, "fence"), "2000000000000000", "PX", "60000"});
    const int delayed = delay_the_acquisition(proxy, fenced);
    AsyncLock lock(client, name, LockOptions{.ttl = 20s, .fencing = fenced});
    asio::cancellation_signal signal;
    bool done = false;
    std::exception_ptr failure;
    bool got = false;
    lock.async_try_lock_for(10s, asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e, bool result) {
                              failure = e;
                              got = result;
                              done = true;
                            }));
    asio::steady_timer blocker(io, 50ms);
    blocker.async_wait([](const std::error_code&) { std::this_thread::sleep_for(200ms); });
    asio::steady_timer canceller(io, 100ms + std::chrono::milliseconds(round % 3));
    canceller.async_wait([&](const std::error_code&) { signal.emit(asio::cancellation_type::terminal); });
    io.restart();
    for (int i = 0; i < 300 && !done; ++i) io.run_for(10ms);
    ASSERT_TRUE(done) << "round " << round << ": the acquisition never completed";
    EXPECT_EQ(proxy.matched(delayed), 1u) << "round " << round << ": the acquisition was not delayed";
    if (got) {
      ++acquired;
      EXPECT_TRUE(lock.held());
      ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_unlock(); }));
      continue;
    }
    ++cancelled;
    EXPECT_FALSE(lock.held());
    bool freed = false;
    for (int i = 0; i < 40 && !freed; ++i) {
      drain(io, 50ms);
      freed = server().command({"EXISTS", name}).integer == 0;
    }
    if (!freed) ++leaked;
    EXPECT_TRUE(freed) << "round " << round << ": cancelled, but the key stays held (PTTL "
                       << server().command({"PTTL", name}).integer << " ms)";
  }
  std::printf("[cancel after grant] %s: %d cancelled, %d acquired, %d keys left held\n", fenced ? "fenced" : "plain",
              cancelled, acquired, leaked);
  EXPECT_GT(cancelled, 0) << "no acquisition was cancelled: the test proves nothing";
}

// The same window through `lock || timer`: the timer wins the group while
// the granted reply is being read. The group drops the lock's result, so a
// lock that still reported success would stay held with nobody using it.
TEST_P(AsyncCancelAfterGrant, ALockThatLosesToATimerIsNotHeld) {
  const bool fenced = GetParam();
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock warm(client, key("warm"), LockOptions{.ttl = 5s, .fencing = fenced});
    co_await warm.async_lock();
    co_await warm.async_unlock();
  }));
  int timer_won = 0, lock_won = 0, leaked = 0;
  for (int round = 0; round < 6; ++round) {
    const std::string name = key("race-" + std::to_string(round));
    if (fenced) server().command({"SET", detail::companion_key(name, "fence"), "2000000000000000", "PX", "60000"});
    const int delayed = delay_the_acquisition(proxy, fenced);
    AsyncLock lock(client, name, LockOptions{.ttl = 20s, .fencing = fenced});
    std::size_t winner = 2;
    asio::steady_timer blocker(io, 50ms);
    blocker.async_wait([](const std::error_code&) { std::this_thread::sleep_for(200ms); });
    ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
      asio::steady_timer timer(co_await asio::this_coro::executor, 100ms + std::chrono::milliseconds(round % 3));
      auto result = co_await (lock.async_try_lock_for(10s) || timer.async_wait(asio::use_awaitable));
      winner = result.index();
    }));
    EXPECT_EQ(proxy.matched(delayed), 1u) << "round " << round << ": the acquisition was not delayed";
    if (winner == 0) {
      ++lock_won;
      if (lock.held()) {
        ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_unlock(); }));
      }
      continue;
    }
    ++timer_won;
    EXPECT_FALSE(lock.held()) << "round " << round << ": the timer won, yet the lock is held";
    bool freed = false;
    for (int i = 0; i < 40 && !freed; ++i) {
      drain(io, 50ms);
      freed = server().command({"EXISTS", name}).integer == 0;
    }
    if (!freed) ++leaked;
    EXPECT_TRUE(freed) << "round " << round << ": the timer won, but the key stays held";
  }
  std::printf("[lock || timer] %s: timer won %d, lock won %d, keys left held %d\n", fenced ? "fenced" : "plain",
              timer_won, lock_won, leaked);
  EXPECT_GT(timer_won, 0) << "the timer never won: the test proves nothing";
}

INSTANTIATE_TEST_SUITE_P(FencedOrNot, AsyncCancelAfterGrant, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "fenced" : "plain"; });

}  // namespace
}  // namespace lockon::test
