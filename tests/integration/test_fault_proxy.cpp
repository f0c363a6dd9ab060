// integration/test_fault_proxy.cpp — FaultProxy (tests/support) in front of a
// real redis-server: each fault does what it says, the server's state shows
// whether a command reached it, and plain traffic (pipelines, split commands,
// large values, pub/sub) passes through unchanged.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/fault_proxy.hpp"
#include "support/fault_proxy_resp.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// A plain blocking socket to the proxy, to see the exact bytes (a truncated
/// reply, EOF) that a RESP client library would hide.
class Socket {
 public:
  explicit Socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("cannot connect to the proxy");
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const auto n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send to the proxy failed");
      sent += static_cast<std::size_t>(n);
    }
  }

  /// Reads until `expected` bytes arrived, EOF, or `timeout`; returns what arrived.
  std::string read(std::size_t expected, std::chrono::milliseconds timeout = 2000ms) {
    std::string got;
    const auto deadline = Clock::now() + timeout;
    while (got.size() < expected && !eof_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= 0ms) break;
      pollfd entry{fd_, POLLIN, 0};
      if (::poll(&entry, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
      char buffer[65536];
      const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      got.append(buffer, static_cast<std::size_t>(n));
    }
    return got;
  }
  /// Sends all of `bytes` if the socket takes them without blocking; false
  /// (having sent a prefix) once it is full.
  bool send_some(const std::string& bytes) {
    std::size_t sent = 0;
    const auto deadline = Clock::now() + 200ms;
    while (sent < bytes.size()) {
      const auto n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      // Full: give the proxy a moment to read more, unless it stopped reading.
      pollfd entry{fd_, POLLOUT, 0};
      if (Clock::now() >= deadline || ::poll(&entry, 1, 50) <= 0) return false;
    }
    return true;
  }
  /// Whether the proxy closed the connection (seen by a read).
  bool eof() const { return eof_; }
  /// Reads until EOF (true) or `timeout` (false); the bytes are discarded.
  bool await_eof(std::chrono::milliseconds timeout = 2000ms) {
    read(SIZE_MAX, timeout);
    return eof_;
  }

 private:
  int fd_;
  bool eof_ = false;
};

std::string multibulk(const std::vector<std::string>& words) {
  std::string out = "*" + std::to_string(words.size()) + "\r\n";
  for (const auto& word : words) out += "$" + std::to_string(word.size()) + "\r\n" + word + "\r\n";
  return out;
}

class FaultProxyTest : public ::testing::Test {
 protected:
  RedisServer server;
  FaultProxy proxy{server.host(), server.port()};

  RawConnection through(std::chrono::milliseconds timeout = 2000ms) {
    return RawConnection(proxy.host(), proxy.port(), {.command_timeout = timeout});
  }
  /// The server's view, bypassing the proxy.
  RawReply direct(const std::vector<std::string>& args) { return server.command(args); }
};

// The framing the proxy relies on, without a server.
TEST(FaultProxyResp, FindsWhereRepliesEnd) {
  using resp::Scan;
  std::size_t length = 0;
  const auto scan = [&](std::string_view data) { return resp::scan_reply(data, length); };
  EXPECT_EQ(scan("+OK\r\n:1\r\n"), Scan::complete);
  EXPECT_EQ(length, 5u);
  EXPECT_EQ(scan("$-1\r\n"), Scan::complete);
  EXPECT_EQ(scan("*2\r\n$3\r\nfoo\r\n*1\r\n:1\r\n+x\r\n"), Scan::complete);
  EXPECT_EQ(length, 21u);
  EXPECT_EQ(scan("*0\r\n"), Scan::complete);
  EXPECT_EQ(scan("%1\r\n+a\r\n_\r\n"), Scan::complete);  // RESP3 map and null
  EXPECT_EQ(length, 11u);
  EXPECT_EQ(scan(">2\r\n+a\r\n,1.5\r\n"), Scan::complete);  // push, double
  EXPECT_EQ(scan("|1\r\n+k\r\n+v\r\n:7\r\n"), Scan::complete);  // attribute, then its value
  EXPECT_EQ(length, 16u);
  EXPECT_EQ(scan("$5\r\nhel"), Scan::incomplete);
  EXPECT_EQ(scan("*2\r\n:1\r\n"), Scan::incomplete);
  EXPECT_EQ(scan("$3\r\nfoobar\r\n"), Scan::malformed);
  EXPECT_EQ(scan("?\r\n"), Scan::malformed);
}

TEST(FaultProxyResp, SplitsCommandsIntoWords) {
  using resp::Scan;
  resp::Command command;
  EXPECT_EQ(resp::scan_command("*2\r\n$3\r\nget\r\n$1\r\nk\r\nPING\r\n", command), Scan::complete);
  EXPECT_EQ(command.name, "GET");
  EXPECT_EQ(command.length, 20u);
  ASSERT_EQ(command.words.size(), 2u);
  EXPECT_EQ(command.words[1], "k");
  EXPECT_EQ(resp::scan_command("set  a\tb\r\n", command), Scan::complete);  // inline
  EXPECT_EQ(command.name, "SET");
  EXPECT_EQ(command.words.size(), 3u);
  EXPECT_EQ(resp::scan_command("\r\n", command), Scan::complete);  // empty: Redis ignores it
  EXPECT_TRUE(command.words.empty());
  EXPECT_EQ(resp::scan_command("*1\r\n$4\r\nPI", command), Scan::incomplete);
  EXPECT_EQ(resp::scan_command("GET k", command), Scan::incomplete);
  EXPECT_EQ(resp::scan_command("*1\r\n:4\r\n", command), Scan::malformed);
}

TEST_F(FaultProxyTest, ForwardsTrafficUnchangedAndCountsCommands) {
  auto raw = through();
  EXPECT_TRUE(raw.command({"SET", "k", "v"}).is("OK"));
  EXPECT_TRUE(raw.command({"GET", "k"}).is("v"));
  EXPECT_TRUE(direct({"GET", "k"}).is("v"));
  EXPECT_EQ(proxy.commands_seen(), 2u);
  EXPECT_EQ(proxy.connection_count(), 1u);

  const Client client(proxy.url());
  EXPECT_EQ(client.command({"GET", "k"}).as_string(), "v");
  client.ping();
  EXPECT_EQ(proxy.url(), "redis://127.0.0.1:" + std::to_string(proxy.port()));
}

TEST_F(FaultProxyTest, ErrorReplyAnswersInPlaceAndTheServerNeverSeesTheCommand) {
  const int rule = proxy.add_rule({.command = "INCR", .action = FaultAction::error_reply,
                                   .error = FaultRule::error_text("READONLY"), .times = 1});
  auto raw = through();
  const RawReply refused = raw.command({"INCR", "counter"});
  ASSERT_TRUE(refused.is_error()) << refused.to_string();
  EXPECT_EQ(refused.str, FaultRule::error_text("READONLY"));
  EXPECT_TRUE(direct({"GET", "counter"}).is_nil());  // never executed
  // Spent after one match: the next INCR reaches the server.
  EXPECT_EQ(raw.command({"INCR", "counter"}).integer, 1);
  EXPECT_EQ(proxy.matched(rule), 1u);

  // Through lockon: the injected code surfaces as a ReplyError.
  proxy.add_rule({.command = "INCR", .action = FaultAction::error_reply, .error = FaultRule::error_text("OOM")});
  const Client client(proxy.url());
  try {
    client.command({"INCR", "counter"});
    ADD_FAILURE() << "no error";
  } catch (const ReplyError& error) {
    EXPECT_EQ(error.code(), "OOM");
  }
  EXPECT_EQ(direct({"GET", "counter"}).str, "1");
}

TEST_F(FaultProxyTest, CloseBeforeForwardLeavesTheServerUnchanged) {
  proxy.add_rule({.command = "SET", .action = FaultAction::close_before_forward});
  Socket socket(proxy.port());
  socket.send(multibulk({"PING"}) + multibulk({"SET", "k", "v"}));
  EXPECT_EQ(socket.read(SIZE_MAX), "+PONG\r\n");  // the earlier reply first, then EOF
  EXPECT_TRUE(socket.eof());
  EXPECT_TRUE(direct({"GET", "k"}).is_nil());

  const Client client(proxy.url(), PoolOptions{});
  EXPECT_THROW(client.command({"SET", "k", "v"}), IoError);
  EXPECT_TRUE(direct({"GET", "k"}).is_nil());
}

TEST_F(FaultProxyTest, CloseAfterForwardExecutesButTheClientGetsEofOnly) {
  proxy.add_rule({.command = "SET", .action = FaultAction::close_after_forward});
  Socket socket(proxy.port());
  socket.send(multibulk({"SET", "k", "v"}));
  EXPECT_EQ(socket.read(SIZE_MAX), "");
  EXPECT_TRUE(socket.eof());
  EXPECT_TRUE(direct({"GET", "k"}).is("v"));  // executed before the client saw EOF
}

TEST_F(FaultProxyTest, CloseMidReplyDeliversAPrefixThenEof) {
  const std::string value(100, 'x');
  ASSERT_TRUE(direct({"SET", "k", value}).is("OK"));
  const std::string full = "$100\r\n" + value + "\r\n";
  proxy.add_rule({.command = "GET", .action = FaultAction::close_mid_reply});
  Socket socket(proxy.port());
  socket.send(multibulk({"GET", "k"}));
  const std::string got = socket.read(SIZE_MAX);
  EXPECT_TRUE(socket.eof());
  EXPECT_FALSE(got.empty());
  EXPECT_LT(got.size(), full.size());
  EXPECT_EQ(got, full.substr(0, got.size()));
}

TEST_F(FaultProxyTest, BlackholeRuleSwallowsTheCommandAndKeepsTheConnection) {
  const int rule = proxy.add_rule({.command = "SET", .action = FaultAction::blackhole});
  auto raw = through(200ms);
  try {
    raw.command({"SET", "k", "v"});
    ADD_FAILURE() << "answered";
  } catch (const RawIoError& error) {
    EXPECT_TRUE(error.timed_out()) << error.what();
  }
  EXPECT_EQ(proxy.connection_count(), 1u);
  EXPECT_EQ(proxy.matched(rule), 1u);
  EXPECT_TRUE(direct({"GET", "k"}).is_nil());
}

TEST_F(FaultProxyTest, DelayHoldsTheMatchedCommandOnly) {
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 150ms});
  auto raw = through();
  auto start = Clock::now();
  EXPECT_TRUE(raw.command({"PING"}).is("PONG"));
  EXPECT_LT(Clock::now() - start, 100ms);
  start = Clock::now();
  EXPECT_TRUE(raw.command({"GET", "k"}).is_nil());
  EXPECT_GE(Clock::now() - start, 150ms);
}

TEST_F(FaultProxyTest, LatencyDelaysEachDirectionWithoutSerializing) {
  auto raw = through();
  proxy.set_latency(40ms);
  auto start = Clock::now();
  EXPECT_TRUE(raw.command({"PING"}).is("PONG"));
  EXPECT_GE(Clock::now() - start, 80ms);
  // Five connections in flight at once: all answered after one round trip,
  // not five (the latency is a delay line, not a queue).
  std::vector<std::unique_ptr<Socket>> sockets;
  for (int i = 0; i < 5; ++i) sockets.push_back(std::make_unique<Socket>(proxy.port()));
  start = Clock::now();
  for (auto& socket : sockets) socket->send(multibulk({"PING"}));
  for (auto& socket : sockets) EXPECT_EQ(socket->read(7), "+PONG\r\n");
  const auto fan_out = Clock::now() - start;
  EXPECT_GE(fan_out, 80ms);
  EXPECT_LT(fan_out, 200ms);
  proxy.set_latency(0us);
  start = Clock::now();
  EXPECT_TRUE(raw.command({"PING"}).is("PONG"));
  EXPECT_LT(Clock::now() - start, 40ms);
}

TEST_F(FaultProxyTest, CommandsPipelinedBehindALostOneAreLostWithIt) {
  proxy.add_rule({.command = "SET", .argument_contains = "first", .action = FaultAction::close_after_forward});
  Socket socket(proxy.port());
  socket.send(multibulk({"SET", "first", "1"}) + multibulk({"SET", "second", "2"}));
  EXPECT_TRUE(socket.await_eof());
  EXPECT_TRUE(direct({"GET", "first"}).is("1"));
  EXPECT_TRUE(direct({"GET", "second"}).is_nil());
  EXPECT_EQ(proxy.commands_seen(), 2u);
}

TEST_F(FaultProxyTest, DelayedCommandsKeepTheirOrder) {
  proxy.add_rule({.command = "SET", .action = FaultAction::delay, .delay = 100ms});
  Socket socket(proxy.port());
  const auto start = Clock::now();
  socket.send(multibulk({"SET", "k", "v"}) + multibulk({"GET", "k"}));
  const std::string expected = "+OK\r\n$1\r\nv\r\n";
  EXPECT_EQ(socket.read(expected.size()), expected);  // GET did not overtake the delayed SET
  EXPECT_GE(Clock::now() - start, 100ms);
}

TEST_F(FaultProxyTest, AClosedUpstreamClosesTheClientAndARefusingOneResetsNewClients) {
  auto raw = through();
  EXPECT_TRUE(raw.command({"PING"}).is("PONG"));
  server.kill();
  EXPECT_THROW(raw.command({"PING"}), RawIoError);
  EXPECT_TRUE(eventually(2000ms, [&] { return proxy.connection_count() == 0; }));
  EXPECT_THROW(through().command({"PING"}), RawIoError);
}

TEST_F(FaultProxyTest, APartitionStopsReadingOnceItHoldsAMegabyte) {
  proxy.blackhole(true);
  Socket socket(proxy.port());
  const std::string command = multibulk({"SET", "k", std::string(1000, 'v')});
  std::string batch;
  for (int i = 0; i < 64; ++i) batch += command;
  // Sent without blocking until the kernel's buffers are full: bounded by
  // them plus the proxy's ~1 MiB, never the whole stream.
  std::size_t sent = 0;
  const std::size_t limit = 256u << 20;
  while (sent < limit && socket.send_some(batch)) sent += batch.size();
  EXPECT_LT(sent, limit);
  proxy.blackhole(false);
}

TEST_F(FaultProxyTest, RefusedConnectionsAreReset) {
  proxy.refuse_new_connections(true);
  EXPECT_THROW(
      {
        auto raw = through();
        raw.command({"PING"});
      },
      RawIoError);
  EXPECT_EQ(proxy.connection_count(), 0u);
  proxy.refuse_new_connections(false);
  EXPECT_TRUE(through().command({"PING"}).is("PONG"));
}

TEST_F(FaultProxyTest, DropConnectionsClosesEveryConnection) {
  auto first = through();
  auto second = through();
  EXPECT_TRUE(first.command({"PING"}).is("PONG"));
  EXPECT_TRUE(second.command({"PING"}).is("PONG"));
  EXPECT_EQ(proxy.connection_count(), 2u);
  proxy.drop_connections();
  EXPECT_EQ(proxy.connection_count(), 0u);
  EXPECT_THROW(first.command({"PING"}), RawIoError);
  EXPECT_THROW(second.command({"PING"}), RawIoError);
  EXPECT_TRUE(through().command({"PING"}).is("PONG"));  // new ones are fine
}

TEST_F(FaultProxyTest, BlackholeHoldsTrafficUntilHealed) {
  auto raw = through(150ms);
  EXPECT_TRUE(raw.command({"PING"}).is("PONG"));
  proxy.blackhole(true);
  Socket socket(proxy.port());
  socket.send(multibulk({"SET", "k", "v"}));
  EXPECT_EQ(socket.read(SIZE_MAX, 150ms), "");
  EXPECT_FALSE(socket.eof());
  EXPECT_TRUE(direct({"GET", "k"}).is_nil());  // held, not delivered
  EXPECT_THROW(raw.command({"PING"}), RawIoError);
  proxy.blackhole(false);
  EXPECT_EQ(socket.read(5), "+OK\r\n");  // the held command went through on healing
  EXPECT_TRUE(direct({"GET", "k"}).is("v"));
}

TEST_F(FaultProxyTest, ConnectionAndTimesFiltersSelectWhichCommandsMatch) {
  const int rule = proxy.add_rule({.command = "PING", .action = FaultAction::error_reply, .connection = 1});
  auto first = through();
  auto second = through();
  EXPECT_TRUE(first.command({"PING"}).is("PONG"));
  EXPECT_TRUE(second.command({"PING"}).is_error());
  EXPECT_EQ(proxy.matched(rule), 1u);
  proxy.remove_rule(rule);
  EXPECT_TRUE(second.command({"PING"}).is("PONG"));

  const int twice = proxy.add_rule({.command = "GET", .argument_contains = "fault",
                                    .action = FaultAction::error_reply, .times = 2});
  EXPECT_TRUE(first.command({"GET", "plain"}).is_nil());  // argument does not match
  EXPECT_TRUE(first.command({"GET", "a-fault-key"}).is_error());
  EXPECT_TRUE(second.command({"get", "fault"}).is_error());  // names are matched upper-cased
  EXPECT_TRUE(first.command({"GET", "fault"}).is_nil());     // spent
  EXPECT_EQ(proxy.matched(twice), 2u);
}

TEST_F(FaultProxyTest, PipelinedInlineAndSplitCommandsArePairedWithTheirReplies) {
  proxy.add_rule({.argument_contains = "second", .action = FaultAction::error_reply, .error = "ERR injected"});
  Socket socket(proxy.port());
  // Three commands in one write, one of them inline.
  socket.send(multibulk({"SET", "first", "1"}) + "SET second 2\r\n" + multibulk({"INCR", "third"}));
  const std::string expected = "+OK\r\n-ERR injected\r\n:1\r\n";
  EXPECT_EQ(socket.read(expected.size()), expected);
  // One command split into single bytes.
  for (const char c : multibulk({"GET", "first"})) {
    socket.send(std::string(1, c));
    std::this_thread::sleep_for(1ms);  // separate reads on the proxy side
  }
  EXPECT_EQ(socket.read(7), "$1\r\n1\r\n");
  EXPECT_EQ(proxy.commands_seen(), 4u);
  EXPECT_TRUE(direct({"GET", "second"}).is_nil());
}

TEST_F(FaultProxyTest, LargeValuesPassIntact) {
  std::string value(5u << 20, '\0');
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<char>('a' + i % 26);
  auto raw = through(5000ms);
  EXPECT_TRUE(raw.command({"SET", "big", value}).is("OK"));
  EXPECT_EQ(raw.command({"GET", "big"}).str, value);
  EXPECT_EQ(direct({"STRLEN", "big"}).integer, static_cast<long long>(value.size()));
}

TEST_F(FaultProxyTest, PubSubMessagesFlowThrough) {
  Socket subscriber(proxy.port());
  subscriber.send(multibulk({"SUBSCRIBE", "news"}));
  const std::string confirmed = "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
  ASSERT_EQ(subscriber.read(confirmed.size()), confirmed);
  auto publisher = through();
  for (const std::string text : {"one", "two"}) {
    EXPECT_EQ(publisher.command({"PUBLISH", "news", text}).integer, 1);
    const std::string message = "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$3\r\n" + text + "\r\n";
    EXPECT_EQ(subscriber.read(message.size()), message);
  }
}

TEST_F(FaultProxyTest, RetargetSendsNewConnectionsElsewhere) {
  RedisServer other;
  ASSERT_TRUE(other.command({"SET", "where", "other"}).is("OK"));
  auto before = through();
  EXPECT_TRUE(before.command({"PING"}).is("PONG"));  // accepted (and connected upstream) by now
  proxy.retarget(other.host(), other.port());
  auto after = through();
  EXPECT_TRUE(before.command({"GET", "where"}).is_nil());
  EXPECT_TRUE(after.command({"GET", "where"}).is("other"));
}

TEST_F(FaultProxyTest, ProxiesSharingAThreadKeepTheirOwnRulesAndLifetimes) {
  RedisServer other;
  const auto thread = FaultProxy::make_thread();
  auto first = std::make_unique<FaultProxy>(server.host(), server.port(), thread);
  FaultProxy second(other.host(), other.port(), thread);
  first->add_rule({.command = "PING", .action = FaultAction::error_reply});
  auto through_first = RawConnection(first->host(), first->port());
  auto through_second = RawConnection(second.host(), second.port());
  EXPECT_TRUE(through_first.command({"PING"}).is_error());
  EXPECT_TRUE(through_second.command({"PING"}).is("PONG"));
  first.reset();  // closes its connections only; the thread serves on
  EXPECT_THROW(through_first.command({"PING"}), RawIoError);
  EXPECT_TRUE(through_second.command({"PING"}).is("PONG"));
  EXPECT_EQ(second.connection_count(), 1u);
}

}  // namespace
}  // namespace lockon::test
