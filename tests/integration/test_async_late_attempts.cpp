// integration/test_async_late_attempts.cpp — AsyncLock sends nothing after
// its caller's deadline. A waiter first waits for its subscription, bounded
// by the deadline; when the server confirms the SUBSCRIBE after it, no
// queueing attempt may go out: its reply would never be read, and its
// outcome would be left to the clean-up. The rule is core::wait_attempt's,
// shared with the blocking Lock (LockProxyPool in test_late_attempts.cpp);
// this proves the Asio port reaches it.
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncLateAttempts : public RedisTest {};

TEST_F(AsyncLateAttempts, ASubscriptionConfirmedAfterTheDeadlineSendsNoAttempt) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  // The warm-up: the client's connection and its subscriber's are made, the
  // scripts loaded (a wait that ends by its deadline on a held key).
  const std::string warm_name = key("warm");
  Lock warm_holder(Client(server().url()), warm_name, {.ttl = 10s});
  ASSERT_TRUE(warm_holder.try_lock());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock warm(client, warm_name, LockOptions{.ttl = 5s});
    EXPECT_FALSE(co_await warm.async_try_lock_for(300ms));
  }));
  warm_holder.unlock();

  const std::string name = key("lock");
  Lock holder(Client(server().url()), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  const int attempts =
      proxy.add_rule({.command = "EVALSHA", .argument_contains = detail::scripts::wait_attempt().sha()});
  const int slow = proxy.add_rule({.command = "SUBSCRIBE", .action = FaultAction::delay, .delay = 400ms, .times = 1});
  const auto connections = proxy.connections_accepted();
  bool got = true;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock waiter(client, name, LockOptions{.ttl = 3s, .wait_poll_interval = 10s});
    got = co_await waiter.async_try_lock_for(150ms);
  }));
  EXPECT_FALSE(got);
  EXPECT_EQ(proxy.matched(slow), 1u) << "the SUBSCRIBE was not the one delayed: the test proved nothing";
  EXPECT_EQ(proxy.matched(attempts), 0u) << "an attempt was sent after the deadline";
  EXPECT_EQ(proxy.connections_accepted(), connections) << "a connection was broken by an unread reply";
  EXPECT_EQ(server().command({"LLEN", detail::companion_key(name, "q")}).integer, 0);
  holder.unlock();
}

}  // namespace
}  // namespace lockon::test
