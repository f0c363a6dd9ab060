// integration/test_tls_faults.cpp — TLS under faults test_tls.cpp leaves
// out: a server killed under a large write (SIGPIPE must never fire; the
// socket BIO sends with MSG_NOSIGNAL) and a non-TLS server that does answer
// a ClientHello (recognized at once, not at the connect timeout).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(TlsFaults, AKilledServerIsATypedErrorNeverSigpipe) {
  // Writing TLS records into a connection the peer reset raises SIGPIPE (and
  // kills this binary) unless every send passes MSG_NOSIGNAL. Checked: with
  // the flag removed from the BIO this test dies.
  TlsRedisServer server;
  const Client client(server.url());
  client.ping();
  const std::string big(1 << 20, 'x');
  server.server().kill();
  int failures = 0;
  for (int i = 0; i < 5; ++i) {
    try {
      client.command({"SET", "big", big});
    } catch (const IoError&) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 5);
  server.server().restart();
  // The pool replaces the broken connection with a fresh handshake.
  EXPECT_EQ(client.command({"SET", "k", "v"}).as_string(), "OK");
}

TEST(TlsFaults, ANonTlsServerThatAnswersIsRecognizedAtOnce) {
  // A plaintext Redis stays silent (test_tls.cpp); a server that answers
  // anything ("-ERR", as another protocol or a proxy might) is told apart by
  // its first bytes, well before the 3 s connect timeout.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size), 0);
  std::thread answer([listener] {
    pollfd ready{listener, POLLIN, 0};
    if (::poll(&ready, 1, 5000) != 1) return;
    const int peer = ::accept(listener, nullptr, nullptr);
    if (peer < 0) return;
    const char reply[] = "-ERR unknown command\r\n";
    (void)::send(peer, reply, sizeof reply - 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(500ms);
    ::close(peer);
  });
  ConnectionOptions options = ConnectionOptions::from_url(
      "rediss://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "?cacert=" + tls_files().ca_cert);
  options.connect_timeout = 3000ms;
  const auto start = Clock::now();
  try {
    Client(options).ping();
    ADD_FAILURE() << "connected to a server that does not speak TLS";
  } catch (const TlsError& error) {
    EXPECT_NE(std::string(error.what()).find("does not speak TLS"), std::string::npos) << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong exception type: " << error.what();
  }
  EXPECT_LT(Clock::now() - start, 1000ms);
  answer.join();
  ::close(listener);
}

}  // namespace
}  // namespace lockon::test
