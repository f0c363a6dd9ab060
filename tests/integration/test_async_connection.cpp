// integration/test_async_connection.cpp — the async client's multiplexed
// connection: pipelined replies reach the right coroutine, a stalled server
// costs TimeoutErrors but never the connection (late replies are discarded
// in step), deadlines and cancellation abandon requests cleanly.
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "async/async_client_impl.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

class AsyncConnectionTest : public RedisTest {
 protected:
  asio::io_context io;
};

TEST_F(AsyncConnectionTest, ConcurrentCoroutinesGetTheirOwnReplies) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string prefix = key("k");
  int checked = 0;
  int wrong = 0;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (int i = 0; i < 500; ++i) {
      asio::co_spawn(ex, [&, i]() -> asio::awaitable<void> {
        const std::string name = prefix + ":" + std::to_string(i);
        for (int round = 0; round < 5; ++round) {
          std::vector<std::string> set{"SET", name, std::to_string(i * 10 + round)};
          std::vector<std::string> get{"GET", name};
          co_await client.async_command(set);
          const Reply value = co_await client.async_command(get);
          if (value.as_string() != std::to_string(i * 10 + round)) ++wrong;
          ++checked;
        }
        ++done;
      }, asio::detached);
    }
    for (int i = 0; i < 1000 && done < 500; ++i) co_await sleep_for(10ms);
  }));
  EXPECT_EQ(checked, 2500);
  EXPECT_EQ(wrong, 0);
  // All of it over the one connection.
  EXPECT_EQ(client.impl()->connection().owed(), 0u);
}

TEST_F(AsyncConnectionTest, StalledServerTimesOutRequestsButKeepsTheConnectionInStep) {
  ConnectionOptions options = ConnectionOptions::from_url(server().url());
  options.socket_timeout = 200ms;
  AsyncClient client(io.get_executor(), options);
  const std::string name = key("k");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> set{"SET", name, "before"};
    co_await client.async_command(set);
  }));
  server().pause();
  int timeouts = 0;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 3; ++i) {
      std::vector<std::string> set{"SET", name, "during-" + std::to_string(i)};
      const auto start = Clock::now();
      try {
        co_await client.async_command(set);
      } catch (const TimeoutError&) {
        ++timeouts;
      }
      EXPECT_LT(Clock::now() - start, 600ms) << "request " << i;
    }
  }));
  EXPECT_EQ(timeouts, 3);
  EXPECT_EQ(client.impl()->connection().owed(), 3u) << "abandoned, still owed: the connection was kept";
  server().resume();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    // The three late replies are read and dropped; this one is ours.
    std::vector<std::string> get{"GET", name};
    const Reply value = co_await client.async_command(get);
    EXPECT_EQ(value.as_string(), "during-2") << "requests ran in order; replies matched in order";
  }));
  EXPECT_EQ(client.impl()->connection().owed(), 0u);
}

TEST_F(AsyncConnectionTest, DeepPipelineOnALiveServerDoesNotTimeOut) {
  // 30 commands of 20 ms of server time each, queued at once, with a 100 ms
  // socket timeout: the last reply comes ~600 ms after it was queued, but
  // replies keep arriving, so nothing times out (the timeout detects a
  // stalled server, not a long queue).
  ConnectionOptions options = ConnectionOptions::from_url(server().url());
  options.socket_timeout = 100ms;
  AsyncClient client(io.get_executor(), options);
  int ok = 0;
  int timeouts = 0;
  const auto start = Clock::now();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (int i = 0; i < 30; ++i) {
      asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
        std::vector<std::string> busy{"EVAL",
                                      "local s = redis.call('TIME') local t0 = s[1] * 1000000 + s[2] "
                                      "repeat local n = redis.call('TIME') until n[1] * 1000000 + n[2] - t0 >= 20000 "
                                      "return 1",
                                      "0"};
        try {
          co_await client.async_command(busy);
          ++ok;
        } catch (const TimeoutError&) {
          ++timeouts;
        }
        ++done;
      }, asio::detached);
    }
    for (int i = 0; i < 500 && done < 30; ++i) co_await sleep_for(10ms);
  }));
  EXPECT_EQ(timeouts, 0);
  EXPECT_EQ(ok, 30);
  EXPECT_GE(Clock::now() - start, 550ms) << "the queue really was deeper than the socket timeout";
}

TEST_F(AsyncConnectionTest, CancelledCommandIsAbandonedNotTornDown) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string list = key("list");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(100ms);
    // BLPOP blocks the (one) connection on the server for 0.5 s (less than
    // the socket timeout: replies keep coming): cancel our wait.
    std::vector<std::string> blpop{"BLPOP", list, "0.5"};
    auto winner = co_await (client.async_command(blpop) || timer.async_wait(asio::use_awaitable));
    EXPECT_EQ(winner.index(), 1u);
    // The next request queues behind the abandoned one and gets its own reply.
    std::vector<std::string> ping{"PING"};
    const Reply pong = co_await client.async_command(ping);
    EXPECT_EQ(pong.as_string(), "PONG");
  }));
}

// On a connection already up, with no deadline, a request's coroutine is
// resumed in place by the read loop (no timer): cancellation must still
// reach it at once, and the stream stay in step.
TEST_F(AsyncConnectionTest, CancelledCommandOnAnUpConnectionIsAbandonedAtOnce) {
  AsyncClient client(io.get_executor(), server().url());
  const std::string list = key("list");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    EXPECT_EQ((co_await client.async_command(ping)).as_string(), "PONG");  // the connection is up
    for (int round = 0; round < 3; ++round) {
      asio::steady_timer timer(co_await asio::this_coro::executor);
      timer.expires_after(100ms);
      std::vector<std::string> blpop{"BLPOP", list, "0.5"};
      const auto start = Clock::now();
      auto winner = co_await (client.async_command(blpop) || timer.async_wait(asio::use_awaitable));
      EXPECT_EQ(winner.index(), 1u);
      EXPECT_LT(Clock::now() - start, 400ms) << "cancelled before BLPOP's 0.5 s ran out";
      const Reply pong = co_await client.async_command(ping);
      EXPECT_EQ(pong.as_string(), "PONG");
    }
  }));
}

// The io_context torn down while coroutines wait, resumed-in-place style, on
// an up connection: their frames are dropped (no crash, no hang).
TEST_F(AsyncConnectionTest, IoContextDestroyedWithOwedRequestsOnAnUpConnection) {
  const std::string list = key("list");
  auto local = std::make_unique<asio::io_context>();
  {
    AsyncClient client(local->get_executor(), server().url());
    ASSERT_TRUE(run_on(*local, [&]() -> asio::awaitable<void> {
      std::vector<std::string> ping{"PING"};
      co_await client.async_command(ping);
    }));
    for (int i = 0; i < 4; ++i) {
      asio::co_spawn(*local, [&client, list]() -> asio::awaitable<void> {
        std::vector<std::string> blpop{"BLPOP", list, "5"};
        co_await client.async_command(blpop);
      }, asio::detached);
    }
    local->restart();
    local->run_for(100ms);
    EXPECT_FALSE(local->stopped()) << "the BLPOPs were still owed";
    local->stop();  // the contract: the client goes after the io_context stopped
  }
  local.reset();
  SUCCEED();
}

TEST_F(AsyncConnectionTest, ServerRestartFailsOwedRequestsTypedAndReconnects) {
  ConnectionOptions options = ConnectionOptions::from_url(server().url());
  options.connect_timeout = 300ms;
  AsyncClient client(io.get_executor(), options);
  const std::string list = key("list");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    co_await client.async_command(ping);
  }));
  bool closed = false;
  bool refused = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> blpop{"BLPOP", list, "5"};
    asio::steady_timer timer(co_await asio::this_coro::executor);
    // Kill the server while BLPOP is owed a reply.
    timer.expires_after(100ms);
    timer.async_wait([&](const asio::error_code&) { server().kill(); });
    try {
      co_await client.async_command(blpop);
    } catch (const ClosedError&) {
      closed = true;  // sent, outcome unknown
    }
    std::vector<std::string> ping{"PING"};
    try {
      co_await client.async_command(ping);
    } catch (const ConnectError&) {
      refused = true;  // nothing sent
    }
  }));
  EXPECT_TRUE(closed);
  EXPECT_TRUE(refused);
  server().restart();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    const Reply pong = co_await client.async_command(ping);
    EXPECT_EQ(pong.as_string(), "PONG");
  }));
}

TEST_F(AsyncConnectionTest, ConnectionClosedWhileIdleIsReplacedBeforeTheNextRequest) {
  AsyncClient client(io.get_executor(), server().url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    co_await client.async_command(ping);
  }));
  // The server restarts while the loop does not run: the EOF waits unread.
  server().restart();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    const Reply pong = co_await client.async_command(ping);  // no ClosedError: never sent into the dead socket
    EXPECT_EQ(pong.as_string(), "PONG");
  }));
}

TEST_F(AsyncConnectionTest, WrongPasswordIsAnAuthError) {
  RedisServer secured(ServerOptions{.requirepass = "s3cret"});
  ConnectionOptions options = ConnectionOptions::from_url(secured.url());
  options.password = "not-the-password";
  AsyncClient client(io.get_executor(), options);
  bool threw = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    try {
      co_await client.async_command(ping);
    } catch (const AuthError& e) {
      threw = true;
      EXPECT_EQ(std::string(e.what()).find("not-the-password"), std::string::npos) << "never the password";
    }
  }));
  EXPECT_TRUE(threw);
  // The right one works.
  AsyncClient good(io.get_executor(), secured.url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    const Reply pong = co_await good.async_command(ping);
    EXPECT_EQ(pong.as_string(), "PONG");
  }));
}

// ConnectionOptions built in code keep host's default "127.0.0.1", and the
// header says a unix_path makes host and port ignored. The async front
// still connected over TCP to host:port (HELLO and AUTH went to that other
// server), and took TLS over a unix socket silently, where the blocking
// front refuses it (review, session 21: "port 16392", not the socket's).
TEST(AsyncUnixSocket, UnixPathWinsOverTheDefaultHostAndTlsIsRefused) {
  const std::string socket_path =
      (std::filesystem::temp_directory_path() / ("lockon-async-" + std::to_string(::getpid()) + ".sock")).string();
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  } remove_socket{socket_path};  // declared first: runs after the server is gone
  RedisServer over_socket({.extra_args = {"--unixsocket", socket_path, "--unixsocketperm", "700"}});
  RedisServer elsewhere;
  ConnectionOptions options;
  options.unix_path = socket_path;
  options.port = elsewhere.port();
  ASSERT_FALSE(options.host.empty());  // the default host stays

  const Client blocking(options);
  EXPECT_EQ(blocking.command({"CONFIG", "GET", "port"}).elements().at(1).as_string(),
            std::to_string(over_socket.port()));
  asio::io_context io;
  AsyncClient async(io.get_executor(), options);
  std::string port_seen;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    const std::vector<std::string> config_get{"CONFIG", "GET", "port"};
    const Reply reply = co_await async.async_command(config_get);
    port_seen = reply.elements().at(1).as_string();
  }));
  EXPECT_EQ(port_seen, std::to_string(over_socket.port())) << "the async client went to host:port";

  options.tls.enabled = true;
  EXPECT_THROW(Client{options}, ConfigError);
  EXPECT_THROW((AsyncClient{io.get_executor(), options}), ConfigError);
}

}  // namespace
}  // namespace lockon::test
