// integration/test_async_subscription.cpp — the async subscriber follows the
// blocking one's channel rules (client/channel_rules.hpp): a wake-up channel
// lingers subscribed for a second after its last waiter left, so a key
// contended in a loop costs one SUBSCRIBE, not one per turn; then it is
// unsubscribed. Before, the async subscriber sent UNSUBSCRIBE the moment its
// last waiter left and SUBSCRIBE again for the next one.
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <string>

#include "async/async_client_impl.hpp"
#include "async/async_subscriber.hpp"
#include "client/channel_rules.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncSubscription : public RedisTest {};

// The claim needs each turn, and the look after the last, well inside the
// linger: on a loaded machine a turn can take longer, so such an attempt
// proves nothing and is run again on a key of its own (3 attempts at most).
TEST_F(AsyncSubscription, AChannelLingersAfterItsLastWaiterThenIsDropped) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  constexpr int kTurns = 5;
  constexpr auto kPrompt = detail::channel_rules::kLinger / 3;
  bool attacked = false;
  for (int attempt = 0; attempt < 3 && !attacked; ++attempt) {
    const std::string name = key("lock-" + std::to_string(attempt));
    // Only this attempt's channel: an earlier attempt's may still linger.
    const int subscribes = proxy.add_rule({.command = "SUBSCRIBE", .argument_contains = name});
    const int unsubscribes = proxy.add_rule({.command = "UNSUBSCRIBE", .argument_contains = name});
    AsyncLock holder(client, name, LockOptions{.ttl = 10s});
    AsyncLock waiter(client, name, LockOptions{.ttl = 10s, .wait_poll_interval = 5s});
    int handed = 0;
    Clock::duration slowest_turn{};
    Clock::time_point last_acquired{};
    ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
      for (int turn = 0; turn < kTurns; ++turn) {
        const auto turn_started = Clock::now();
        EXPECT_TRUE(co_await holder.async_try_lock_for(1s));
        bool acquired = false;
        asio::co_spawn(io, [&]() -> asio::awaitable<void> { acquired = co_await waiter.async_try_lock_for(3s); },
                       asio::detached);
        // Queued (a 5 s poll: only the hand-over's message wakes it in time).
        for (int i = 0; i < 200 && server().command({"LLEN", detail::companion_key(name, "q")}).integer != 1; ++i)
          co_await sleep_for(5ms);
        co_await holder.async_unlock();
        for (int i = 0; i < 400 && !acquired; ++i) co_await sleep_for(5ms);
        if (acquired) {
          ++handed;
          last_acquired = Clock::now();
        }
        co_await waiter.async_unlock();
        slowest_turn = std::max(slowest_turn, Clock::now() - turn_started);
      }
    }));
    EXPECT_EQ(handed, kTurns);
    const auto subscriber = client.impl()->subscriber_if_made();
    ASSERT_NE(subscriber, nullptr);
    const std::size_t subscribed_after = subscriber->subscribed_channels();
    if (slowest_turn > kPrompt || Clock::now() - last_acquired > kPrompt) continue;  // not within the linger
    attacked = true;
    // One SUBSCRIBE for the five turns, all well within the linger.
    EXPECT_EQ(proxy.matched(subscribes), 1u);
    EXPECT_EQ(proxy.matched(unsubscribes), 0u);
    EXPECT_GE(subscribed_after, 1u) << "dropped at once: no linger";
    // Then dropped, about a linger after the last waiter left.
    bool dropped = false;
    while (!dropped && Clock::now() < last_acquired + detail::channel_rules::kLinger + 3s) {
      io.restart();
      io.run_for(10ms);
      dropped = proxy.matched(unsubscribes) == 1;
    }
    EXPECT_TRUE(dropped) << "still subscribed long after the linger";
    EXPECT_GE(Clock::now() - last_acquired, detail::channel_rules::kLinger - kPrompt);
  }
  EXPECT_TRUE(attacked) << "no attempt kept its turns within the linger (a machine this slow proves nothing)";
}

}  // namespace
}  // namespace lockon::test
