// integration/test_async_cluster_refresh.cpp — the async client's cluster
// map read when the coroutine that started it is cancelled: the next
// candidate's read throws operation_aborted (not a lockon Error), and the
// "a read is under way" flag it left set made every later request of the
// client wait for a read that never came, then fail (ServerBusyError), for
// good (found by review, session 17).
#include <asio/co_spawn.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "cluster_test_fixture.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/fault_proxy.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

class AsyncClusterRefresh : public ClusterTest {
 protected:
  asio::io_context io;
};

TEST_F(AsyncClusterRefresh, ACancelledMapReadDoesNotStopLaterOnes) {
  const auto masters = cluster().masters();
  ASSERT_GE(masters.size(), 2u);
  // The first seed answers the map read slowly (through a proxy); the
  // second is a master reached directly.
  FaultProxy slow(masters[0]->host(), masters[0]->port());
  slow.add_rule({.command = "CLUSTER", .action = FaultAction::delay, .delay = 500ms, .times = 1});
  const std::string url = "redis-cluster://127.0.0.1:" + std::to_string(slow.port()) + ",127.0.0.1:" +
                          std::to_string(masters[1]->port()) + "?socket_timeout=2000";
  AsyncClient client(io.get_executor(), url);
  const std::string name = unique_key("refresh");
  bool timer_won = false;
  std::string later_error;
  bool later_ok = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    // The first request reads the map; cancelled 100 ms in, while the slow
    // seed holds its read.
    asio::steady_timer timer(co_await asio::this_coro::executor, 100ms);
    std::vector<std::string> get{"GET", name};
    auto winner = co_await (client.async_command(get) || timer.async_wait(asio::use_awaitable));
    timer_won = winner.index() == 1;
    // Later requests read the map again and are served.
    for (int i = 0; i < 3; ++i) {
      try {
        std::vector<std::string> set{"SET", name, "v"};
        co_await client.async_command(set);
        later_ok = true;
      } catch (const Error& e) {
        later_error = e.what();
        later_ok = false;
      }
    }
  }, 30s));
  EXPECT_TRUE(timer_won) << "the first request was not cancelled during its map read: the test proves nothing";
  EXPECT_TRUE(later_ok) << "requests after a cancelled map read fail: " << later_error;
  EXPECT_EQ(cluster().owner_of_slot(detail::key_slot(name)).command({"GET", name}).str, "v");
}

}  // namespace
}  // namespace lockon::test
