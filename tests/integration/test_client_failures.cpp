// integration/test_client_failures.cpp — the client layer when servers
// misbehave: command and connect timeouts (DEBUG SLEEP, SIGSTOP, a full
// accept queue), refused and killed servers and transparent recovery, and
// fan-out with one shared per-node deadline (and its EVALSHA fallback).
#include <arpa/inet.h>
#include <signal.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "client/connection.hpp"
#include "client/fanout.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "client/script.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


std::string port_of(const RedisServer& server) { return std::to_string(server.port()); }

/// Runs `fn`, expecting it to throw E; returns what() ("" and a failure if not).
template <class E, class Fn>
std::string expect_throw(Fn&& fn, const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": no exception";
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << context << ": wrong exception type: " << error.what();
  }
  return {};
}

// ---------------------------------------------------------------- timeouts

class ClientTimeouts : public RedisTest {};

TEST_F(ClientTimeouts, CommandOutlivingTheSocketTimeoutIsTimeoutErrorThenClientRecovers) {
  const Client client(server().url() + "?socket_timeout=100ms");
  ASSERT_EQ(client.options().socket_timeout, 100ms);
  client.ping();  // connected: the timeout below is the command's, not the connect's

  const auto started = Clock::now();
  const std::string message =
      expect_throw<TimeoutError>([&] { client.command({"DEBUG", "SLEEP", "1"}); }, "DEBUG SLEEP 1");
  const auto waited = ms_since(started);
  EXPECT_GE(waited, 90) << "gave up before the socket timeout";
  EXPECT_LT(waited, 600) << "the 100 ms socket timeout did not bound the command";
  EXPECT_NE(message.find("DEBUG on 127.0.0.1:" + port_of(server())), std::string::npos) << message;
  EXPECT_NE(message.find("timed out"), std::string::npos) << message;

  // Wait (bounded) for the server to wake up, then the very same client
  // works again at the first attempt: the broken connection was replaced.
  RawConnection probe = server().connect({.command_timeout = 3000ms});
  ASSERT_TRUE(probe.command({"PING"}).is("PONG"));
  EXPECT_NO_THROW(client.ping());
  EXPECT_EQ(client.command({"ECHO", "after"}).as_string(), "after");
}

TEST(ClientTimeoutsOwnServer, PausedServerTimesOutWithinBoundsAndResumeRestoresService) {
  RedisServer server;
  const Client client(server.url() + "?socket_timeout=100ms&connect_timeout=200ms");
  ASSERT_NO_THROW(client.ping());

  server.pause();
  // A broken and then a fresh connection: on the fresh one the handshake
  // and the PING leave together, so it is the same TimeoutError.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto started = Clock::now();
    const std::string message = expect_throw<TimeoutError>([&] { client.ping(); }, "PING while paused");
    const auto waited = ms_since(started);
    EXPECT_GE(waited, 90) << "attempt " << attempt;
    EXPECT_LT(waited, 600) << "attempt " << attempt;
    EXPECT_NE(message.find("127.0.0.1:" + port_of(server)), std::string::npos) << message;
  }
  server.resume();
  EXPECT_NO_THROW(client.ping());
  EXPECT_EQ(client.command({"SET", "k", "v"}).as_string(), "OK");
  EXPECT_TRUE(server.command({"GET", "k"}).is("v"));
}

// A periodic signal (a profiler's SIGPROF, an application's setitimer)
// interrupts the blocking read of a reply: the socket timeout must still
// end it. recv with SO_RCVTIMEO is never restarted after a signal, and the
// read restarted itself with the whole timeout again: every 50 ms, forever,
// against a silent server (found by review, session 18).
TEST(ClientTimeoutsOwnServer, PeriodicSignalsDoNotStretchTheSocketTimeout) {
  RedisServer server;
  const Client client(server.url() + "?socket_timeout=300ms&auto_pipeline=0");
  ASSERT_NO_THROW(client.ping());
  struct sigaction quiet{};
  quiet.sa_handler = [](int) {};
  quiet.sa_flags = SA_RESTART;
  sigemptyset(&quiet.sa_mask);
  struct sigaction before{};
  ASSERT_EQ(::sigaction(SIGALRM, &quiet, &before), 0);
  itimerval every_50ms{};
  every_50ms.it_interval.tv_usec = 50'000;
  every_50ms.it_value.tv_usec = 50'000;
  ASSERT_EQ(::setitimer(ITIMER_REAL, &every_50ms, nullptr), 0);
  server.pause();
  // Bounded either way: the server resumes after 3 s, and a read that
  // never timed out then returns the reply.
  std::atomic<bool> done{false};
  std::thread resumer([&] {
    for (int i = 0; i < 300 && !done; ++i) std::this_thread::sleep_for(10ms);
    server.resume();
  });
  const auto started = Clock::now();
  bool timed_out = false;
  try {
    client.command({"GET", "k"});
  } catch (const TimeoutError&) {
    timed_out = true;
  }
  const long long waited = ms_since(started);
  done = true;
  resumer.join();
  const itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::sigaction(SIGALRM, &before, nullptr);
  EXPECT_TRUE(timed_out) << "the read outlived its 300 ms socket timeout: " << waited << " ms";
  EXPECT_LT(waited, 1000);
  EXPECT_NO_THROW(client.ping());
}

TEST(ClientTimeoutsOwnServer, HandshakeOnAPausedServerIsBoundedBySocketTimeout) {
  // The kernel still accepts TCP connections for a stopped process: the
  // connect succeeds and the handshake (HELLO with AUTH, sent together with
  // the PING) is what must time out.
  RedisServer server({.requirepass = "pw"});
  server.pause();
  const Client client(server.url() + "?socket_timeout=100ms&connect_timeout=100ms");
  const auto started = Clock::now();
  const std::string message = expect_throw<TimeoutError>([&] { client.ping(); }, "first PING");
  EXPECT_LT(ms_since(started), 600);
  EXPECT_NE(message.find("AUTH"), std::string::npos) << message;
  EXPECT_EQ(message.find("pw@"), std::string::npos) << message;
  server.resume();
  EXPECT_NO_THROW(client.ping());
}

TEST(ClientTimeoutsOwnServer, RequestLargerThanTheSocketBuffersToAPausedServerTimesOut) {
  // The send side is bounded too: once the kernel buffers are full, a send
  // to a stopped server waits for the socket timeout, then gives up.
  RedisServer server;
  const Client client(server.url() + "?socket_timeout=100ms", PoolOptions{.size = 1});
  client.ping();
  server.pause();
  const std::string huge(32u << 20, 'x');
  const auto started = Clock::now();
  const std::string message = expect_throw<TimeoutError>([&] { client.command({"SET", "k", huge}); }, "SET 32 MB");
  const auto waited = ms_since(started);
  std::cout << "32 MB SET to a paused server gave up after " << waited << " ms\n";
  EXPECT_GE(waited, 90);
  EXPECT_LT(waited, 1500);
  EXPECT_NE(message.find("SET on 127.0.0.1:" + port_of(server)), std::string::npos) << message;
  server.resume();
  EXPECT_NO_THROW(client.ping());
  EXPECT_TRUE(server.command({"EXISTS", "k"}).integer == 0) << "a partial request must never execute";
}

/// A listening socket whose accept queue is full: further SYNs are dropped,
/// so a connect to it hangs until the client's own connect timeout.
class FullBacklog {
 public:
  FullBacklog() : listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener_, 0) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0)
      throw std::runtime_error("cannot set up a listening socket");
    port_ = ntohs(address.sin_port);
    for (int i = 0; i < 3; ++i) {  // backlog 0 queues one; the rest hang
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      static_cast<void>(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address));
      fillers_.push_back(fd);
    }
    std::this_thread::sleep_for(20ms);  // let the handshakes settle
  }
  ~FullBacklog() {
    for (const int fd : fillers_) ::close(fd);
    ::close(listener_);
  }
  FullBacklog(const FullBacklog&) = delete;
  FullBacklog& operator=(const FullBacklog&) = delete;
  int port() const { return port_; }

 private:
  int listener_;
  int port_ = 0;
  std::vector<int> fillers_;
};

TEST(ClientTimeoutsOwnServer, ConnectTimeoutBoundsAConnectThatGetsNoAnswer) {
  const FullBacklog black_hole;
  const std::string endpoint = "127.0.0.1:" + std::to_string(black_hole.port());
  const Client client("redis://" + endpoint + "?connect_timeout=150ms&socket_timeout=2s");
  const auto started = Clock::now();
  // Nothing was sent: ConnectError (the "nothing reached the server" kind).
  const std::string message = expect_throw<ConnectError>([&] { client.ping(); }, "PING");
  const auto waited = ms_since(started);
  EXPECT_GE(waited, 140);
  EXPECT_LT(waited, 700);
  EXPECT_NE(message.find(endpoint), std::string::npos) << message;
  EXPECT_NE(message.find("timed out"), std::string::npos) << message;
}

// --------------------------------------------------- refused, killed, back

TEST(ClientServerLoss, RefusedConnectionIsAQuickConnectErrorNamingEndpointAndOperation) {
  RedisServer server;
  const std::string url = server.url();
  const std::string endpoint = "127.0.0.1:" + port_of(server);
  server.kill();  // nothing listens on the port any more

  const Client client(url);
  const auto started = Clock::now();
  const std::string message = expect_throw<ConnectError>([&] { client.command({"GET", "k"}); }, "GET");
  EXPECT_LT(ms_since(started), 500);
  EXPECT_NE(message.find(endpoint), std::string::npos) << message;
  EXPECT_NE(message.find("connect"), std::string::npos) << message;
  EXPECT_NE(message.find("refused"), std::string::npos) << message;
  EXPECT_THROW(client.ping(), IoError);  // and again: nothing cached
}

TEST(ClientServerLoss, ServerKilledMidSessionFailsTheNextCommandThenRestartRecovers) {
  RedisServer server;
  const Client client(server.url() + "?socket_timeout=1s");
  ASSERT_EQ(client.command({"SET", "k", "before"}).as_string(), "OK");

  server.kill();
  auto started = Clock::now();
  try {
    client.command({"GET", "k"});
    FAIL() << "GET on a killed server succeeded";
  } catch (const TimeoutError& error) {
    FAIL() << "a dead peer must not look like a slow one: " << error.what();
  } catch (const IoError& error) {
    const bool expected_kind =
        dynamic_cast<const ClosedError*>(&error) != nullptr || dynamic_cast<const ConnectError*>(&error) != nullptr;
    EXPECT_TRUE(expected_kind) << error.what();
    EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + port_of(server)), std::string::npos) << error.what();
  }
  EXPECT_LT(ms_since(started), 500);
  // Down: reconnecting is refused, quickly.
  started = Clock::now();
  EXPECT_THROW(client.ping(), ConnectError);
  EXPECT_LT(ms_since(started), 500);

  server.restart();  // same port, empty
  EXPECT_NO_THROW(client.ping());
  EXPECT_TRUE(client.command({"GET", "k"}).is_nil());
  EXPECT_EQ(client.command({"SET", "k", "after"}).as_string(), "OK");
  EXPECT_TRUE(server.command({"GET", "k"}).is("after"));
}

TEST(ClientServerLoss, LargeRequestToAKilledServerIsClosedErrorNotSigpipe) {
  // A request larger than the socket buffers needs several write(2) calls;
  // the dead peer resets the connection after the first one, and the next
  // write raises SIGPIPE, which by default kills the whole process. The
  // requests go straight onto the borrowed socket: ensure_connected()'s idle
  // check would otherwise notice the closed socket and never write to it.
  RedisServer server;
  const Client client(server.url(), PoolOptions{.size = 1});
  const std::string big(4u << 20, 'x');
  ASSERT_EQ(client.command({"SET", "k", big}).as_string(), "OK");
  for (const bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipeline" : "command");
    server.kill();
    try {
      auto lease = client.impl()->pool().borrow();
      const std::array<std::string_view, 3> set{"SET", "k", big};
      lease->append(set);
      if (pipelined) lease->append(set);
      lease->read_reply("SET");
      ADD_FAILURE() << "a killed server accepted a write";
    } catch (const ClosedError& error) {
      EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + port_of(server)), std::string::npos) << error.what();
    } catch (const ConnectError& error) {
      // The reset arrived before the first byte left: resent once on a
      // fresh socket, which the dead server refused.
      EXPECT_NE(std::string(error.what()).find("refused"), std::string::npos) << error.what();
    }
    server.restart();
    EXPECT_EQ(client.command({"SET", "k", big}).as_string(), "OK");  // recovered
  }
}

TEST(ClientServerLoss, NoPooledConnectionFailsAfterARestart) {
  RedisServer server;
  const Client client(server.url(), PoolOptions{.size = 3, .wait_timeout = 1000ms});
  auto& pool = client.impl()->pool();
  const std::array<std::string_view, 1> ping{"PING"};
  {  // open all three
    auto a = pool.borrow();
    auto b = pool.borrow();
    auto c = pool.borrow();
    for (auto* lease : {&a, &b, &c}) (*lease)->ensure_connected();
  }
  server.kill();
  server.restart();
  // Hold all three at once so that each stale connection is exercised: each
  // is found closed before sending and replaced.
  auto a = pool.borrow();
  auto b = pool.borrow();
  auto c = pool.borrow();
  for (auto* lease : {&a, &b, &c}) {
    detail::Connection& connection = **lease;
    detail::ReplyPtr reply;
    EXPECT_NO_THROW(reply = connection.command(ping, "PING")) << "a stale socket was used";
    ASSERT_TRUE(reply != nullptr);
    EXPECT_EQ(std::string_view(reply->str, reply->len), "PONG");
    EXPECT_TRUE(connection.connected());
  }
}

// ------------------------------------------------------------------ fan-out

struct Nodes {
  std::vector<std::unique_ptr<RedisServer>> servers;
  std::vector<std::unique_ptr<detail::Connection>> connections;

  explicit Nodes(std::size_t n) : servers(start_servers(n)) {
    for (const auto& server : servers)
      connections.push_back(std::make_unique<detail::Connection>(ConnectionOptions::from_url(server->url())));
  }
  void connect_all() {
    for (auto& connection : connections) connection->ensure_connected();
  }
  /// One target per node sending `args`.
  std::vector<detail::FanOutTarget> targets(std::vector<std::string> args) {
    std::vector<detail::FanOutTarget> result;
    for (auto& connection : connections) {
      result.push_back({.connection = connection.get(),
                        .send =
                            [args](detail::Connection& c) {
                              const std::vector<std::string_view> views(args.begin(), args.end());
                              c.append(views);
                            },
                        .finish = nullptr});
    }
    return result;
  }
};

bool is_status(const detail::FanOutResult& result, std::string_view text) {
  return !result.error && result.reply && result.reply->type == REDIS_REPLY_STATUS &&
         std::string_view(result.reply->str, result.reply->len) == text;
}

/// The exception in a result, rethrown as E: its message, or "" + failure.
template <class E>
std::string error_of(const detail::FanOutResult& result) {
  if (!result.error) {
    ADD_FAILURE() << "expected an error, got a reply";
    return {};
  }
  return expect_throw<E>([&] { std::rethrow_exception(result.error); }, "fan-out result");
}

TEST(ClientFanOut, PausedNodeTimesOutAfterOnePerNodeTimeoutOthersAnswer) {
  constexpr auto kTimeout = 400ms;
  Nodes nodes(3);
  nodes.connect_all();
  nodes.servers[1]->pause();

  auto targets = nodes.targets({"PING"});
  const auto started = Clock::now();
  const auto results = detail::fan_out(targets, kTimeout, "PING");
  const auto waited = ms_since(started);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(is_status(results[0], "PONG"));
  EXPECT_TRUE(is_status(results[2], "PONG"));
  const std::string message = error_of<TimeoutError>(results[1]);
  EXPECT_NE(message.find("127.0.0.1:" + port_of(*nodes.servers[1])), std::string::npos) << message;
  EXPECT_GE(waited, 380);
  EXPECT_LT(waited, 1000);

  // Two paused nodes, the first one first in line: still one timeout, not
  // two, and the healthy node's reply (already buffered) is not lost.
  nodes.servers[0]->pause();
  auto again = nodes.targets({"PING"});
  const auto started2 = Clock::now();
  const auto results2 = detail::fan_out(again, kTimeout, "PING");
  const auto waited2 = ms_since(started2);
  error_of<TimeoutError>(results2[0]);
  // Its connection broke in the first fan-out: the reconnect probe gets no
  // answer from the frozen server, so nothing is sent (ConnectError).
  error_of<ConnectError>(results2[1]);
  EXPECT_TRUE(is_status(results2[2], "PONG"));
  EXPECT_GE(waited2, 380);
  EXPECT_LT(waited2, 750) << "two paused nodes cost two timeouts";

  // Resumed: the broken connections reconnect on the next fan-out.
  nodes.servers[0]->resume();
  nodes.servers[1]->resume();
  auto healed = nodes.targets({"PING"});
  const auto results3 = detail::fan_out(healed, 1000ms, "PING");
  for (const auto& result : results3) EXPECT_TRUE(is_status(result, "PONG"));
}

TEST(ClientFanOut, ThreeSlowNodesCostOneSlowRoundTripNotThree) {
  Nodes nodes(3);
  nodes.connect_all();
  auto targets = nodes.targets({"DEBUG", "SLEEP", "0.1"});
  const auto started = Clock::now();
  const auto results = detail::fan_out(targets, 2000ms, "DEBUG SLEEP");
  const auto waited = ms_since(started);
  std::cout << "3 x DEBUG SLEEP 0.1 fanned out: " << waited << " ms\n";
  for (const auto& result : results) EXPECT_TRUE(is_status(result, "OK"));
  EXPECT_GE(waited, 95);
  EXPECT_LT(waited, 250);
  // The per-node timeout used during the fan-out was restored afterwards.
  for (auto& connection : nodes.connections) {
    const std::array<std::string_view, 1> ping{"PING"};
    detail::ReplyPtr reply = connection->command(ping, "PING");
    EXPECT_EQ(std::string_view(reply->str, reply->len), "PONG");
  }
}

TEST(ClientFanOut, DeadNodeFailsAtConnectWithoutDelayingTheOthers) {
  Nodes nodes(3);  // not connected yet: fan_out connects
  const std::string dead = "127.0.0.1:" + port_of(*nodes.servers[0]);
  nodes.servers[0]->kill();
  auto targets = nodes.targets({"PING"});
  const auto started = Clock::now();
  const auto results = detail::fan_out(targets, 500ms, "PING");
  EXPECT_LT(ms_since(started), 400);
  const std::string message = error_of<ConnectError>(results[0]);
  EXPECT_NE(message.find(dead), std::string::npos) << message;
  EXPECT_TRUE(is_status(results[1], "PONG"));
  EXPECT_TRUE(is_status(results[2], "PONG"));
}

TEST(ClientFanOut, ScriptsFallBackToEvalOnEveryNode) {
  Nodes nodes(3);
  const detail::Script script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  const std::array<std::string_view, 1> keys{"n"};
  const std::array<std::string_view, 1> args{"5"};
  ASSERT_TRUE(nodes.servers[1]->command({"SET", "n", "10"}).is("OK"));
  for (int round = 1; round <= 2; ++round) {  // NOSCRIPT everywhere, then cached everywhere
    std::vector<detail::FanOutTarget> targets;
    for (auto& connection : nodes.connections) {
      targets.push_back(
          {.connection = connection.get(),
           .send = [&](detail::Connection& c) { detail::append_evalsha(c, script, keys, args); },
           .finish = [&](detail::Connection& c, detail::ReplyPtr reply) {
             return detail::resolve_noscript(c, script, keys, args, std::move(reply), "INCRBY script");
           }});
    }
    const auto results = detail::fan_out(targets, 1000ms, "INCRBY script");
    for (std::size_t i = 0; i < results.size(); ++i) {
      SCOPED_TRACE("node " + std::to_string(i) + ", round " + std::to_string(round));
      ASSERT_FALSE(results[i].error);
      ASSERT_TRUE(results[i].reply != nullptr);
      EXPECT_EQ(results[i].reply->type, REDIS_REPLY_INTEGER);
      EXPECT_EQ(results[i].reply->integer, (i == 1 ? 10 : 0) + 5 * round);
    }
  }
}

}  // namespace
}  // namespace lockon::test
