// integration/test_async_subscription.cpp — the async subscriber follows the
// blocking one's channel rules (client/channel_rules.hpp): a wake-up channel
// lingers subscribed for a second after its last waiter left, so a key
// contended in a loop costs one SUBSCRIBE, not one per turn; then it is
// unsubscribed. Before, the async subscriber sent UNSUBSCRIBE the moment its
// last waiter left and SUBSCRIBE again for the next one.
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "async/async_client_impl.hpp"
#include "async/async_subscriber.hpp"
#include "client/channel_rules.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncSubscription : public RedisTest {};

TEST_F(AsyncSubscription, AChannelLingersAfterItsLastWaiterThenIsDropped) {
  FaultProxy proxy(server().host(), server().port());
  const int subscribes = proxy.add_rule({.command = "SUBSCRIBE"});
  const int unsubscribes = proxy.add_rule({.command = "UNSUBSCRIBE"});
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock holder(client, name, LockOptions{.ttl = 10s});
  AsyncLock waiter(client, name, LockOptions{.ttl = 10s, .wait_poll_interval = 5s});
  constexpr int kTurns = 5;
  int handed = 0;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (int turn = 0; turn < kTurns; ++turn) {
      EXPECT_TRUE(co_await holder.async_try_lock_for(1s));
      bool acquired = false;
      asio::co_spawn(io, [&]() -> asio::awaitable<void> { acquired = co_await waiter.async_try_lock_for(3s); },
                     asio::detached);
      // Queued (a 5 s poll: only the hand-over's message wakes it in time).
      for (int i = 0; i < 200 && server().command({"LLEN", detail::companion_key(name, "q")}).integer != 1; ++i)
        co_await sleep_for(5ms);
      co_await holder.async_unlock();
      for (int i = 0; i < 400 && !acquired; ++i) co_await sleep_for(5ms);
      if (acquired) ++handed;
      co_await waiter.async_unlock();
    }
  }));
  EXPECT_EQ(handed, kTurns);
  // One SUBSCRIBE for the five turns, all well within the linger.
  EXPECT_EQ(proxy.matched(subscribes), 1u);
  EXPECT_EQ(proxy.matched(unsubscribes), 0u);
  const auto subscriber = client.impl()->subscriber_if_made();
  ASSERT_NE(subscriber, nullptr);
  EXPECT_EQ(subscriber->subscribed_channels(), 1u) << "dropped at once: no linger";
  // Then dropped, about a linger after the last waiter left.
  const auto idle_since = Clock::now();
  bool dropped = false;
  while (!dropped && Clock::now() < idle_since + detail::channel_rules::kLinger + 3s) {
    io.restart();
    io.run_for(10ms);
    dropped = subscriber->subscribed_channels() == 0;
  }
  EXPECT_TRUE(dropped) << "still subscribed long after the linger";
  EXPECT_GE(Clock::now() - idle_since, detail::channel_rules::kLinger - 50ms);
  EXPECT_EQ(proxy.matched(unsubscribes), 1u);
}

}  // namespace
}  // namespace lockon::test
