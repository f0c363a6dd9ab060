// integration/test_async_tls.cpp — the async client over rediss://: the
// certificate is verified (a wrong CA is a TlsError within connect_timeout),
// locks work over TLS, and the handshake never blocks the event loop: a
// timer coroutine keeps ticking while a handshake waits on a silent server
// or crawls through a relay that delays every chunk.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int listen_loopback(int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("listen");
  port = ntohs(addr.sin_port);
  return fd;
}

// A TCP port whose connections the kernel accepts but nobody reads: a TLS
// ClientHello gets no answer, ever.
class SilentListener {
 public:
  SilentListener() { fd_ = listen_loopback(port_); }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Relays ONE connection to 127.0.0.1:target, holding every chunk `delay`
// before forwarding it (both ways): a slow path, byte-exact (TLS passes).
class SlowRelay {
 public:
  SlowRelay(int target, std::chrono::milliseconds delay) : target_(target), delay_(delay) {
    listener_ = listen_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~SlowRelay() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }

 private:
  void run() {
    pollfd accept_poll{listener_, POLLIN, 0};
    const auto give_up = Clock::now() + 20s;
    while (!stop_ && Clock::now() < give_up && ::poll(&accept_poll, 1, 50) <= 0) {
    }
    if (stop_ || !(accept_poll.revents & POLLIN)) return;
    const int client = ::accept(listener_, nullptr, nullptr);
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<unsigned short>(target_));
    if (client < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (client >= 0) ::close(client);
      ::close(server);
      return;
    }
    char buffer[16384];
    for (int round = 0; round < 100000 && !stop_; ++round) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(fds[i].fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
          closed = true;
          break;
        }
        std::this_thread::sleep_for(delay_);
        if (::send(fds[1 - i].fd, buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) closed = true;
      }
      if (closed) break;
    }
    ::close(client);
    ::close(server);
  }

  int target_;
  std::chrono::milliseconds delay_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Counts 10 ms ticks until `stop`.
asio::awaitable<void> ticker(std::atomic<int>& ticks, const bool& stop) {
  for (int i = 0; i < 10000 && !stop; ++i) {
    co_await sleep_for(10ms);
    ++ticks;
  }
}

class AsyncTlsTest : public ::testing::Test {
 protected:
  asio::io_context io;
};

TEST_F(AsyncTlsTest, CommandsAndLocksOverVerifiedTls) {
  TlsRedisServer server;
  AsyncClient client(io.get_executor(), server.url());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> args1{"PING"};
    const Reply pong = co_await client.async_command(args1);
    EXPECT_EQ(pong.as_string(), "PONG");
    AsyncLock lock(client, "tls-k");
    co_await lock.async_lock();
    EXPECT_TRUE(lock.held());
    // The server sees the key: the lock really went over the TLS port.
    std::vector<std::string> args2{"EXISTS", "tls-k"};
    const Reply exists = co_await client.async_command(args2);
    EXPECT_EQ(exists.as_integer(), 1);
    co_await lock.async_unlock();
    EXPECT_FALSE(lock.held());
  }));
}

TEST_F(AsyncTlsTest, WrongCaIsATlsErrorWithinTheDeadline) {
  TlsRedisServer server;
  const std::string url = server.bare_url() + "?cacert=" + tls_files().other_ca_cert + "&connect_timeout=2000";
  AsyncClient client(io.get_executor(), url);
  const auto start = Clock::now();
  bool typed = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      std::vector<std::string> args3{"PING"};
      co_await client.async_command(args3);
      ADD_FAILURE() << "PING over an unverifiable certificate succeeded";
    } catch (const TlsError& error) {
      typed = true;
      EXPECT_NE(std::string(error.what()).find("certificate verify failed"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("127.0.0.1:" + std::to_string(server.tls_port())), std::string::npos)
          << error.what();
    }
  }));
  EXPECT_TRUE(typed);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(AsyncTlsTest, SilentServerHandshakeTimesOutWithoutBlockingTheLoop) {
  SilentListener silent;
  const std::string url = "rediss://127.0.0.1:" + std::to_string(silent.port()) + "?cacert=" +
                          tls_files().ca_cert + "&connect_timeout=600";
  AsyncClient client(io.get_executor(), url);
  std::atomic<int> ticks{0};
  bool stop = false;
  Clock::duration took{};
  bool typed = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::co_spawn(co_await asio::this_coro::executor, ticker(ticks, stop), asio::detached);
    const auto start = Clock::now();
    try {
      std::vector<std::string> args4{"PING"};
      co_await client.async_command(args4);
      ADD_FAILURE() << "PING to a silent port succeeded";
    } catch (const TlsError& error) {
      typed = true;
      EXPECT_NE(std::string(error.what()).find("handshake timed out"), std::string::npos) << error.what();
    }
    took = Clock::now() - start;
    stop = true;
  }));
  EXPECT_TRUE(typed);
  EXPECT_GE(took, 550ms);
  EXPECT_LT(took, 1500ms);
  // ~60 ticks of 10 ms in 600 ms; a blocked loop would give ~0.
  EXPECT_GE(ticks.load(), 30);
}

TEST_F(AsyncTlsTest, SlowHandshakeCompletesWhileTheLoopKeepsTicking) {
  TlsRedisServer server;
  SlowRelay relay(server.tls_port(), 150ms);
  const std::string url = "rediss://127.0.0.1:" + std::to_string(relay.port()) + "?cacert=" +
                          tls_files().ca_cert + "&connect_timeout=10000&socket_timeout=10000";
  AsyncClient client(io.get_executor(), url);
  std::atomic<int> ticks{0};
  bool stop = false;
  Clock::duration took{};
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::co_spawn(co_await asio::this_coro::executor, ticker(ticks, stop), asio::detached);
    const auto start = Clock::now();
    std::vector<std::string> args5{"PING"};
    const Reply pong = co_await client.async_command(args5);
    EXPECT_EQ(pong.as_string(), "PONG");
    took = Clock::now() - start;
    stop = true;
  }));
  // At least ClientHello out, server flight back, Finished + HELLO out, its
  // answer back: four delayed chunks.
  EXPECT_GE(took, 450ms);
  // The loop ran the ticker all along (10 ms ticks; allow heavy CI load).
  EXPECT_GE(ticks.load(), static_cast<int>(took / 10ms) / 3);
  EXPECT_GE(ticks.load(), 15);
}

}  // namespace
}  // namespace lockon::test
