// integration/test_tls.cpp — rediss:// against real `redis-server --tls-port`
// with certificates the harness makes (support/tls_certs.hpp): commands,
// locks (the hand-over subscriber and the watchdog connect over TLS too,
// since the client knows only the TLS port), lock_on, Redlock, mutual TLS,
// and every failure the handshake can meet — each checked for its exception
// type, a message fragment, and its time bound.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const TlsCerts& certs() { return TlsCerts::get(); }

ServerOptions tls_server(const CertPair& pair, bool auth_clients = false, std::string password = {}) {
  ServerOptions options;
  options.requirepass = std::move(password);
  options.tls = {.cert_file = pair.cert, .key_file = pair.key, .ca_file = certs().client_ca_file(),
                 .auth_clients = auth_clients};
  return options;
}

/// "?cacert=<the test CA>" plus `more` ("&sni=...").
std::string trust(const std::string& more = {}) { return "?cacert=" + certs().ca_file() + more; }

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

/// Runs `connect` (which must throw E) and checks the message and that it
/// took at most `bound`.
template <class E, class F>
void expect_failure(F&& connect, const std::string& fragment, std::chrono::milliseconds bound,
                    const std::string& secret = {}) {
  const auto start = Clock::now();
  try {
    connect();
    ADD_FAILURE() << "no exception; expected one saying '" << fragment << "'";
  } catch (const E& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    if (!secret.empty()) {
      EXPECT_EQ(message.find(secret), std::string::npos) << message;
    }
    std::cout << "    " << ms_since(start) << " ms: " << message << "\n";
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong exception type: " << error.what();
  }
  EXPECT_LE(ms_since(start), bound.count());
}

ConnectionOptions options_for(const std::string& url, std::chrono::milliseconds connect_timeout) {
  ConnectionOptions options = ConnectionOptions::from_url(url);
  options.connect_timeout = connect_timeout;
  return options;
}

// ------------------------------------------------------------ working TLS

TEST(Tls, CommandsAndPipelinesOverRediss) {
  RedisServer server(tls_server(certs().server(), false, "tls-s3cret"));
  const Client client(server.tls_url(trust()));
  EXPECT_TRUE(client.options().tls.enabled);
  client.ping();
  EXPECT_EQ(client.command({"SET", "k", std::string(100'000, 'x')}).as_string(), "OK");
  EXPECT_EQ(client.command({"GET", "k"}).as_string().size(), 100'000u);  // several TLS records
  for (int i = 0; i < 200; ++i) client.command({"INCR", "n"});
  EXPECT_EQ(client.command({"GET", "n"}).as_string(), "200");
  // By name too (the certificate names localhost as well as 127.0.0.1).
  const Client by_name("rediss://:tls-s3cret@localhost:" + std::to_string(server.tls_port()) + trust());
  EXPECT_EQ(by_name.command({"GET", "n"}).as_string(), "200");
}

TEST(Tls, LockHandOverAndWatchdogRunOverTls) {
  RedisServer server(tls_server(certs().server()));
  const Client client(server.tls_url(trust()));
  Lock holder(client, "tls-lock", {.ttl = 1s});
  ASSERT_TRUE(holder.try_lock());
  // The waiter is woken by the pub/sub hand-over (its poll interval is 30 s),
  // so its subscriber connection must have come up over TLS.
  std::atomic<long long> waited_ms{-1};
  Clock::time_point released;
  std::thread waiter([&] {
    Lock lock(client, "tls-lock", {.ttl = 1s, .wait_poll_interval = 30s});
    const auto start = Clock::now();
    if (lock.try_lock_for(10s)) {
      waited_ms = ms_since(start);
      // Watchdog over TLS: hold four leases long.
      std::this_thread::sleep_for(4s);
      EXPECT_TRUE(lock.owned());
      EXPECT_FALSE(lock.lost());
      lock.unlock();
      EXPECT_EQ(lock.last_unlock_error(), nullptr);
    }
  });
  std::this_thread::sleep_for(2500ms);  // > 2 leases: the holder's watchdog renews over TLS
  EXPECT_TRUE(holder.owned());
  EXPECT_FALSE(holder.lost());
  released = Clock::now();
  holder.unlock();
  waiter.join();
  ASSERT_GE(waited_ms.load(), 2000);
  EXPECT_LT(waited_ms.load(), 2500 + 1000) << "hand-over waited for a poll, not the TLS subscriber";
  EXPECT_EQ(server.command({"EXISTS", "tls-lock"}).integer, 0);
}

TEST(Tls, LockOnThroughRedisLockerWithARedissUrl) {
  RedisServer server(tls_server(certs().server()));
  const RedisLocker locker(server.tls_url(trust()), {.ttl = 5s, .key_prefix = "tls"});
  int runs = 0;
  const auto bump = locker.lock_on<0>("tls::bump", [&](LockContext& context, const std::string& id) {
    EXPECT_EQ(server.command({"EXISTS", context.key()}).integer, 1);
    ++runs;
    return id.size();
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) bump("abc");
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(runs, 15);
}

TEST(Tls, RedlockNodesOverRediss) {
  std::vector<std::unique_ptr<RedisServer>> servers;
  std::vector<std::string> urls;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(std::make_unique<RedisServer>(tls_server(certs().server())));
    urls.push_back(servers.back()->tls_url(trust()));
  }
  Redlock lock(urls, "tls-redlock", {.ttl = 5s});
  ASSERT_TRUE(lock.try_lock());
  for (const auto& server : servers) EXPECT_EQ(server->command({"EXISTS", "tls-redlock"}).integer, 1);
  Redlock other(urls, "tls-redlock", {.ttl = 5s});
  EXPECT_FALSE(other.try_lock());
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  for (const auto& server : servers) EXPECT_EQ(server->command({"EXISTS", "tls-redlock"}).integer, 0);
}

TEST(Tls, MutualTlsWithAClientCertificate) {
  RedisServer server(tls_server(certs().server(), /*auth_clients=*/true));
  const CertPair client_pair = certs().client();
  const Client client(server.tls_url(trust("&cert=" + client_pair.cert + "&key=" + client_pair.key)));
  EXPECT_EQ(client.command({"SET", "m", "tls"}).as_string(), "OK");
  Lock lock(client, "mtls-lock");
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(Tls, InsecureSkipsVerificationOnlyWhenAsked) {
  RedisServer server(tls_server(certs().untrusted()));
  const Client client(server.tls_url("?insecure=true"));
  client.ping();
}

TEST(Tls, AKilledServerIsATypedErrorNeverSigpipe) {
  // Writing TLS records into a connection the peer reset would raise
  // SIGPIPE (and kill this test binary) without the MSG_NOSIGNAL BIO.
  RedisServer server(tls_server(certs().server()));
  const Client client(server.tls_url(trust()));
  client.ping();
  const std::string big(1 << 20, 'x');
  server.kill();
  int failures = 0;
  for (int i = 0; i < 5; ++i) {
    try {
      client.command({"SET", "big", big});
    } catch (const IoError&) {
      ++failures;
    }
  }
  EXPECT_EQ(failures, 5);
  server.restart();
  // The pool replaces the broken connection with a fresh handshake.
  EXPECT_EQ(client.command({"SET", "k", "v"}).as_string(), "OK");
}

// ------------------------------------------------------------ failures

TEST(TlsFailure, ClientCertificateRequiredButNoneSent) {
  RedisServer server(tls_server(certs().server(), /*auth_clients=*/true, "tls-s3cret"));
  // The refusal may come during the handshake (TLS 1.2) or with the first
  // read (TLS 1.3 checks it after the client's Finished): TlsError both ways.
  expect_failure<TlsError>([&] { Client(server.tls_url(trust())).ping(); }, "client certificate", 2s, "tls-s3cret");
}

TEST(TlsFailure, UnknownCa) {
  RedisServer server(tls_server(certs().untrusted(), false, "tls-s3cret"));
  expect_failure<TlsError>([&] { Client(server.tls_url(trust())).ping(); }, "unknown CA", 2s, "tls-s3cret");
  // Against the system store (no cacert) the test CA is unknown as well.
  expect_failure<TlsError>([&] { Client(server.tls_url()).ping(); }, "unable to get local issuer certificate", 2s);
}

TEST(TlsFailure, NameMismatch) {
  RedisServer server(tls_server(certs().wrong_name()));
  expect_failure<TlsError>([&] { Client(server.tls_url(trust())).ping(); }, "name mismatch", 2s);
  // The certificate names wrong.example: sni=wrong.example makes it verify.
  const Client by_sni(server.tls_url(trust("&sni=wrong.example")));
  by_sni.ping();
  // And a correct certificate does not verify for another sni.
  RedisServer good(tls_server(certs().server()));
  expect_failure<TlsError>([&] { Client(good.tls_url(trust("&sni=other.example"))).ping(); },
                           "does not name 'other.example'", 2s);
}

TEST(TlsFailure, ExpiredCertificate) {
  RedisServer server(tls_server(certs().expired()));
  expect_failure<TlsError>([&] { Client(server.tls_url(trust())).ping(); }, "expired", 2s);
}

TEST(TlsFailure, UnusableSettingsNameTheFile) {
  RedisServer server(tls_server(certs().server()));
  expect_failure<TlsError>([&] { Client(server.tls_url("?cacert=/nonexistent/ca.pem")).ping(); },
                           "/nonexistent/ca.pem", 2s);
  // A key that does not belong to the certificate.
  const std::string mismatched = "&cert=" + certs().client().cert + "&key=" + certs().server().key;
  expect_failure<TlsError>([&] { Client(server.tls_url(trust(mismatched))).ping(); }, "does not match", 2s);
  expect_failure<ConfigError>([&] { Client(server.tls_url(trust("&cert=" + certs().client().cert))).ping(); },
                              "both cert and key", 2s);
}

TEST(TlsFailure, RedissToAPlaintextRedisFailsAtTheConnectTimeout) {
  // A plaintext Redis never answers a ClientHello (it waits for the end of
  // an inline command line): the handshake fails at the connect timeout.
  RedisServer server({.requirepass = "tls-s3cret"});
  const std::string url = "rediss://:tls-s3cret@127.0.0.1:" + std::to_string(server.port()) + trust();
  expect_failure<TlsError>([&] { Client(options_for(url, 1500ms)).ping(); }, "not speak TLS (plaintext port?)",
                           1500ms + 200ms, "tls-s3cret");
  EXPECT_EQ(server.command({"PING"}).str, "PONG");  // the server is fine
}

TEST(TlsFailure, RedissToAPlaintextServerThatAnswersFailsAtOnce) {
  // A plaintext server that answers anything (here "-ERR", as a proxy or
  // another protocol might) is recognized by its first byte, immediately.
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
  const std::string url = "rediss://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + trust();
  expect_failure<TlsError>([&] { Client(options_for(url, 3000ms)).ping(); }, "does not speak TLS (plaintext port?)",
                           300ms);
  answer.join();
  ::close(listener);
}

TEST(TlsFailure, PlaintextClientOnTheTlsPortFailsWithinTheConnectTimeout) {
  RedisServer server(tls_server(certs().server(), false, "tls-s3cret"));
  const std::string url = "redis://:tls-s3cret@127.0.0.1:" + std::to_string(server.tls_port());
  expect_failure<IoError>([&] { Client(options_for(url, 1000ms)).ping(); }, "if this is a TLS port, use rediss://", 1000ms + 300ms,
                          "tls-s3cret");
}

TEST(TlsFailure, StalledServerDuringTheHandshakeIsBoundedByTheConnectTimeout) {
  RedisServer server(tls_server(certs().server()));
  server.pause();  // the port accepts (kernel backlog) but nothing answers
  expect_failure<ConnectError>([&] { Client(options_for(server.tls_url(trust()), 800ms)).ping(); },
                               "TLS handshake timed out", 800ms + 200ms);
  server.resume();
  Client(server.tls_url(trust())).ping();
}

}  // namespace
}  // namespace lockon::test
