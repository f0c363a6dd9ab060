// integration/test_async_faults.cpp — AsyncLock when notifications or the
// server fail: a waiter whose wake-ups cannot be delivered (ACL without
// channel rights) still acquires within the poll interval; a holder whose
// server dies is told its lease is lost (unreachable) by its lease's end.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncFaultTest : public RedisTest {
 protected:
  asio::io_context io;
};

TEST_F(AsyncFaultTest, WaiterWithoutChannelRightsAcquiresByPolling) {
  RedisServer acl_server(ServerOptions{.acl_users = {"alice on >pw ~* resetchannels +@all"}});
  const std::string url = "redis://alice:pw@127.0.0.1:" + std::to_string(acl_server.port());
  AsyncClient client(io.get_executor(), url);
  Clock::duration waited{};
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock holder(client, "k");
    AsyncLock waiter(client, "k", LockOptions{.wait_poll_interval = 150ms});
    co_await holder.async_lock();
    auto ex = co_await asio::this_coro::executor;
    bool acquired = false;
    Clock::time_point released_at{};
    asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
      co_await waiter.async_lock();
      acquired = true;
      waited = Clock::now() - released_at;
      co_await waiter.async_unlock();
    }, asio::detached);
    co_await sleep_for(300ms);  // queued, its subscription refused
    EXPECT_FALSE(acquired);
    released_at = Clock::now();
    co_await holder.async_unlock();
    for (int i = 0; i < 200 && !acquired; ++i) co_await sleep_for(5ms);
    EXPECT_TRUE(acquired);
  }));
  // At most one poll interval (plus a round trip and scheduling slack).
  EXPECT_LT(waited, 150ms + 200ms);
}

TEST_F(AsyncFaultTest, HolderWhoseServerDiesIsToldByTheLeaseEnd) {
  RedisServer own;
  ConnectionOptions options = ConnectionOptions::from_url(own.url());
  options.connect_timeout = 100ms;
  options.socket_timeout = 100ms;
  AsyncClient client(io.get_executor(), options);
  std::atomic<int> losses{0};
  LossReason reason{};
  Clock::time_point lost_at{};
  Clock::time_point acquired_at{};
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, "k", LockOptions{.ttl = 600ms, .on_lost = [&](const LossEvent& event) {
                                               reason = event.reason;
                                               lost_at = Clock::now();
                                               ++losses;
                                             }});
    acquired_at = Clock::now();
    co_await lock.async_lock();
    own.kill();
    for (int i = 0; i < 200 && losses.load() == 0; ++i) co_await sleep_for(10ms);
    EXPECT_TRUE(lock.lost());
    co_await lock.async_unlock();  // never fails
    EXPECT_NE(lock.last_unlock_error(), nullptr);
  }));
  EXPECT_EQ(losses.load(), 1);
  EXPECT_EQ(reason, LossReason::unreachable);
  // Declared once the provable lease end passed: not before it, and soon after.
  EXPECT_GE(lost_at - acquired_at, 550ms);
  EXPECT_LT(lost_at - acquired_at, 600ms + 400ms);
}

TEST_F(AsyncFaultTest, DeadlineOnAStalledServerReturnsInTimeAndTheLateWinIsReleased) {
  RedisServer own;
  ConnectionOptions options = ConnectionOptions::from_url(own.url());
  options.socket_timeout = 300ms;
  AsyncClient client(io.get_executor(), options);
  AsyncLock lock(client, "k");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    co_await client.async_command(ping);  // connected
  }));
  own.pause();
  Clock::duration took{};
  bool acquired = true;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    const auto start = Clock::now();
    acquired = co_await lock.async_try_lock_for(200ms);
    took = Clock::now() - start;
  }));
  EXPECT_FALSE(acquired);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 450ms) << "the deadline, not the socket timeout, bounds the call";
  // The SET is still in the server's socket: resumed, it wins the key —
  // and the background clean-up (cancel-wait after it on the same
  // connection) passes it on.
  own.resume();
  bool released = false;
  for (int i = 0; i < 100 && !released; ++i) {
    drain(io, 50ms);
    released = own.command({"EXISTS", "k"}).integer == 0;
  }
  EXPECT_TRUE(released) << "a late win was left holding the key";
  EXPECT_FALSE(lock.held());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    const bool got = co_await lock.async_try_lock();
    EXPECT_TRUE(got);
    co_await lock.async_unlock();
  }));
}

// A queued waiter whose deadline passes while the server is stalled: it
// leaves the queue within a short grace (the background clean-up finishes
// the job), not after the socket timeout (found by review, session 17:
// 300 ms + up to 1 s).
TEST_F(AsyncFaultTest, QueuedWaiterOnAStalledServerReturnsByItsDeadline) {
  RedisServer own;
  AsyncClient client(io.get_executor(), own.url());  // socket timeout 1 s
  AsyncLock holder(client, "k", LockOptions{.ttl = 10s});
  AsyncLock waiter(client, "k", LockOptions{.ttl = 10s, .wait_poll_interval = 5s});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await holder.async_lock(); }));
  Clock::duration took{};
  bool acquired = true;
  bool done = false;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    const auto start = Clock::now();
    acquired = co_await waiter.async_try_lock_for(400ms);
    took = Clock::now() - start;
    done = true;
  }, asio::detached);
  drain(io, 150ms);  // queued, asleep
  EXPECT_EQ(own.command({"LLEN", "{k}:q"}).integer, 1);
  own.pause();
  for (int i = 0; i < 200 && !done; ++i) drain(io, 10ms);
  own.resume();
  ASSERT_TRUE(done);
  EXPECT_FALSE(acquired);
  EXPECT_LT(took, 400ms + 150ms) << "the deadline was overrun by "
                                 << std::chrono::duration_cast<std::chrono::milliseconds>(took - 400ms).count()
                                 << " ms";
  // The entry is removed once the server answers again.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    drain(io, 30ms);
    gone = own.command({"LLEN", "{k}:q"}).integer == 0;
  }
  EXPECT_TRUE(gone) << "the waiter's queue entry stayed";
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await holder.async_unlock(); }));
}

}  // namespace
}  // namespace lockon::test
