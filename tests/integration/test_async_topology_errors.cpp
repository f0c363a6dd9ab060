// integration/test_async_topology_errors.cpp — the AsyncClient's errors when
// a Cluster map read or a Sentinel resolution fails on every node it tries:
// a refused password stays an AuthError and a certificate that does not
// verify a TlsError, as on a single server; a refused port among them makes
// it a ConnectError. Messages name the nodes and never the password.
//
// Before the fix (security review M2), AsyncCluster::refresh and
// async_resolve_master caught every Error and threw a plain ConnectError:
// each AuthError/TlsError test below failed with "wrong class: ConnectError".
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <string>
#include <typeinfo>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_fixture.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

const std::string kFastTimeouts = "connect_timeout=500ms&socket_timeout=500ms";

std::string topology_error_class(const std::exception& e) {
  if (dynamic_cast<const AuthError*>(&e)) return "AuthError";
  if (dynamic_cast<const TlsError*>(&e)) return "TlsError";
  if (dynamic_cast<const ConnectError*>(&e)) return "ConnectError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return typeid(e).name();
}

std::string at(int port) { return "127.0.0.1:" + std::to_string(port); }

// One PING through a new AsyncClient on `options`; expects E, whose message
// contains each of `named` and not `secret`.
template <class E>
void expect_ping_error(const ConnectionOptions& options, const std::vector<std::string>& named,
                       const std::string& secret = {}) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), options);
  ASSERT_TRUE(run_on(
      io,
      [&]() -> asio::awaitable<void> {
        std::vector<std::string> ping{"PING"};
        try {
          co_await client.async_command(ping);
          ADD_FAILURE() << "no error";
        } catch (const E& error) {
          const std::string message = error.what();
          for (const std::string& part : named)
            EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
          if (!secret.empty()) {
            EXPECT_EQ(message.find(secret), std::string::npos) << "the password leaked: " << message;
          }
        } catch (const std::exception& error) {
          ADD_FAILURE() << "wrong class: " << topology_error_class(error) << ": " << error.what();
        }
      },
      20s));
}

TEST(AsyncClusterErrors, WrongPasswordOnEverySeedIsAnAuthError) {
  RedisServer first({.requirepass = "Right-Pw1"});
  RedisServer second({.requirepass = "Right-Pw1"});
  expect_ping_error<AuthError>(
      ConnectionOptions::from_url("redis-cluster://:Bad-Pw2@" + at(first.port()) + "," + at(second.port()) + "?" +
                                  kFastTimeouts),
      {at(first.port()), at(second.port()), "WRONGPASS", "cluster map"}, "Bad-Pw2");
}

TEST(AsyncClusterErrors, WrongPasswordOnOneSeedAndARefusedPortIsAConnectError) {
  RedisServer secured({.requirepass = "Right-Pw1"});
  const int refusing = reserve_free_port();  // nothing listens there
  const auto options = ConnectionOptions::from_url("redis-cluster://:Bad-Pw2@" + at(secured.port()) + "," +
                                                   at(refusing) + "?" + kFastTimeouts);
  asio::io_context io;
  AsyncClient client(io.get_executor(), options);
  std::string outcome;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    try {
      co_await client.async_command(ping);
      outcome = "no error";
    } catch (const std::exception& error) {
      outcome = topology_error_class(error) + ": " + error.what();
    }
  }));
  release_free_port(refusing);
  EXPECT_EQ(outcome.rfind("ConnectError: ", 0), 0u) << outcome;
  EXPECT_NE(outcome.find("WRONGPASS"), std::string::npos) << outcome;
  EXPECT_EQ(outcome.find("Bad-Pw2"), std::string::npos) << outcome;
}

TEST(AsyncClusterErrors, CertificateForAnotherNameIsATlsError) {
  TlsRedisServer wrong({.cert = ServerCert::wrong_name});
  expect_ping_error<TlsError>(ConnectionOptions::from_url("rediss-cluster://" + at(wrong.tls_port()) + "?cacert=" +
                                                          tls_files().ca_cert + "&" + kFastTimeouts),
                              {at(wrong.tls_port()), "host name mismatch"});
}

TEST(AsyncSentinelErrors, SentinelRefusingItsPasswordIsAnAuthError) {
  RedisServer sentinel({.requirepass = "Sentinel-Pw1"});
  ConnectionOptions options =
      ConnectionOptions::from_url("redis-sentinel://" + at(sentinel.port()) + "?" + kFastTimeouts + "#mymaster");
  options.sentinel_password = "Bad-Sentinel-Pw2";
  expect_ping_error<AuthError>(options, {at(sentinel.port()), "WRONGPASS", "mymaster"}, "Bad-Sentinel-Pw2");
}

TEST(AsyncSentinelErrors, MasterRefusingThePasswordIsAnAuthError) {
  SentinelSet set;
  set.master().command({"ACL", "SETUSER", "locker", "on", ">Right-Pw1", "~*", "&*", "+@all"});
  std::string url = set.url("?" + kFastTimeouts);
  url.insert(url.find("://") + 3, "locker:Bad-Pw2@");
  expect_ping_error<AuthError>(ConnectionOptions::from_url(url), {at(set.master().port()), "WRONGPASS", "mymaster"},
                               "Bad-Pw2");
}

TEST(AsyncSentinelErrors, SentinelCertificateForAnotherNameIsATlsError) {
  TlsRedisServer wrong({.cert = ServerCert::wrong_name});
  expect_ping_error<TlsError>(ConnectionOptions::from_url("rediss-sentinel://" + at(wrong.tls_port()) + "?cacert=" +
                                                          tls_files().ca_cert + "&" + kFastTimeouts + "#mymaster"),
                              {at(wrong.tls_port()), "host name mismatch"});
}

}  // namespace
}  // namespace lockon::test
