// The window in which two masters grant after a Sentinel failover, async
// front: as test_sentinel_failover_window.cpp, with AsyncClients on one
// io_context — every client's requests run on the new master within about
// a second of the promotion, whatever order its URL lists the sentinels in.
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "integration/async_support.hpp"
#include "integration/sentinel_failover_support.hpp"
#include "lockon/async.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kBound = 1000ms;  // the target; see test_sentinel_failover_window.cpp

// The port of the server `client`'s requests run on now (0: none answered).
asio::awaitable<int> port_of(AsyncClient& client) {
  try {
    std::vector<std::string> info_server{"INFO", "server"};  // (a braced list in co_await: GCC 12 ICE)
    const Reply reply = co_await client.async_command(std::move(info_server));
    const std::string info = reply.as_string();
    const auto at = info.find("tcp_port:");
    co_return at == std::string::npos ? 0 : std::stoi(info.substr(at + 9));
  } catch (...) {
    co_return 0;
  }
}

TEST(AsyncSentinelFailoverWindow, EveryClientLeavesTheOldMasterSoonAfterThePromotionWhateverItsSentinelOrder) {
  SentinelSet set(SentinelSetOptions{.replicas = 2, .failover_timeout = 10s, .replica_sync_delay = 5s});
  const int old_port = set.master().port();
  asio::io_context io;
  // Sentinel 0 leads the failover (SENTINEL FAILOVER is sent to it).
  std::vector<std::unique_ptr<AsyncClient>> clients;
  for (const auto& order : {std::vector<std::size_t>{0, 1, 2}, std::vector<std::size_t>{2, 1, 0}})
    clients.push_back(std::make_unique<AsyncClient>(io.get_executor(), set.url_in_order(order, kShortTimeouts)));
  for (auto& client : clients) {
    int port = 0;
    ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { port = co_await port_of(*client); }, 10s));
    ASSERT_EQ(port, old_port);  // resolved: the listeners start
  }
  // The listeners subscribe as the loop runs.
  std::thread loop_for_listeners([&] { drain(io, 3s); });
  const bool listening = listened_on_every_sentinel(set, static_cast<int>(clients.size()));
  loop_for_listeners.join();
  std::printf("[async failover window] every sentinel has %zu listening clients: %s\n", clients.size(),
              listening ? "yes" : "no (a client listens on fewer sentinels)");

  PromotionWatch watch(set);
  std::vector<Clock::time_point> moved(clients.size());
  std::vector<int> moved_to(clients.size(), 0);
  int running = static_cast<int>(clients.size());
  io.restart();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    asio::co_spawn(io, [&, i]() -> asio::awaitable<void> {
      const auto until = Clock::now() + 30s;
      while (Clock::now() < until) {
        const int port = co_await port_of(*clients[i]);
        if (port != 0 && port != old_port) {
          moved[i] = Clock::now();
          moved_to[i] = port;
          co_return;
        }
        co_await sleep_for(5ms);
      }
    }, [&](std::exception_ptr) {
      if (--running == 0) io.stop();
    });
  }
  std::thread loop([&] { io.run_for(35s); });
  const bool failover_ok = set.sentinel_command_at(0, {"SENTINEL", "FAILOVER", SentinelSet::kMasterName}).is("OK");
  const int new_port = watch.wait();
  loop.join();
  ASSERT_TRUE(failover_ok) << set.logs();
  ASSERT_NE(new_port, 0) << "no replica was promoted:\n" << set.logs();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    ASSERT_EQ(moved_to[i], new_port) << "client " << i << " never ran a request on the new master:\n" << set.logs();
    const auto lag = std::chrono::duration_cast<std::chrono::milliseconds>(moved[i] - watch.promoted_at());
    std::printf("[async failover window] client %zu (%s): first request on the new master %lld ms after the "
                "promotion\n",
                i, i == 0 ? "leader first" : "leader last", static_cast<long long>(lag.count()));
    EXPECT_LT(lag, kBound) << "client " << i << " kept calling the old master";
  }
}

}  // namespace
}  // namespace lockon::test
