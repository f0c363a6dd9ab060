// integration/test_topology_errors.cpp — the blocking Client's errors when a
// Cluster map read or a Sentinel resolution fails on every node it tries:
// a failure every node shares and that retrying cannot cure (a refused
// password, a certificate that does not verify) keeps its class, as it does
// on a single server; refused ports and mixed failures stay ConnectError.
// Messages name the nodes tried and never the password.
//
// Before the fix (security review M2), the cluster map read and the Sentinel
// resolution caught every Error and threw a plain ConnectError: each
// AuthError/TlsError test below failed with "wrong class: ConnectError"
// (the CLI exited 69, unavailable, for a wrong password instead of 77), and
// the PermissionError test with "wrong class: ConnectError" likewise.
#include <chrono>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include <gtest/gtest.h>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_fixture.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

const std::string kFastTimeouts = "connect_timeout=500ms&socket_timeout=500ms";

std::string topology_error_class(const std::exception& e) {
  if (dynamic_cast<const AuthError*>(&e)) return "AuthError";
  if (dynamic_cast<const PermissionError*>(&e)) return "PermissionError";
  if (dynamic_cast<const TlsError*>(&e)) return "TlsError";
  if (dynamic_cast<const ConnectError*>(&e)) return "ConnectError";
  if (dynamic_cast<const UnsupportedServerError*>(&e)) return "UnsupportedServerError";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return typeid(e).name();
}

// Runs `use` and expects E, whose message contains each of `named` and not
// `secret`. Returns the message ("" if E was not thrown).
template <class E, class F>
std::string expect_error(F&& use, const std::vector<std::string>& named, const std::string& secret = {}) {
  try {
    use();
    ADD_FAILURE() << "no error";
  } catch (const E& error) {
    const std::string message = error.what();
    for (const std::string& part : named) EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
    if (!secret.empty()) {
      EXPECT_EQ(message.find(secret), std::string::npos) << "the password leaked: " << message;
    }
    return message;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "wrong class: " << topology_error_class(error) << ": " << error.what();
  }
  return {};
}

std::string at(int port) { return "127.0.0.1:" + std::to_string(port); }

// ------------------------------------------------------------------ Cluster

// The map read is the first thing a cluster client does; a non-cluster
// server is enough to reach (and fail) it.
TEST(ClusterErrors, WrongPasswordOnEverySeedIsAnAuthError) {
  RedisServer first({.requirepass = "Right-Pw1"});
  RedisServer second({.requirepass = "Right-Pw1"});
  const std::string url =
      "redis-cluster://:Bad-Pw2@" + at(first.port()) + "," + at(second.port()) + "?" + kFastTimeouts;
  const std::string message = expect_error<AuthError>([&] { Client(url).ping(); },
                                                      {at(first.port()), at(second.port()), "WRONGPASS"}, "Bad-Pw2");
  EXPECT_NE(message.find("cluster map"), std::string::npos) << message;
}

TEST(ClusterErrors, WrongPasswordOnOneSeedAndARefusedPortIsAConnectError) {
  RedisServer secured({.requirepass = "Right-Pw1"});
  const int refusing = reserve_free_port();  // nothing listens there
  const std::string url = "redis-cluster://:Bad-Pw2@" + at(secured.port()) + "," + at(refusing) + "?" + kFastTimeouts;
  try {
    Client(url).ping();
    ADD_FAILURE() << "no error";
  } catch (const AuthError& error) {
    ADD_FAILURE() << "one seed refused the password, the other was down: not an AuthError: " << error.what();
  } catch (const TlsError& error) {
    ADD_FAILURE() << "not a TlsError: " << error.what();
  } catch (const ConnectError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("WRONGPASS"), std::string::npos) << message;
    EXPECT_NE(message.find(at(refusing)), std::string::npos) << message;
    EXPECT_EQ(message.find("Bad-Pw2"), std::string::npos) << message;
  }
  release_free_port(refusing);
}

// An ACL user who may not run CLUSTER commands: NOPERM is the server's
// lasting answer, a PermissionError as any other command's NOPERM.
TEST(ClusterErrors, UserWithoutClusterPermissionIsAPermissionError) {
  RedisServer server({.acl_users = {"locker on >Right-Pw1 ~* &* +@all -cluster"}});
  const std::string url = "redis-cluster://locker:Right-Pw1@" + at(server.port()) + "?" + kFastTimeouts;
  expect_error<PermissionError>([&] { Client(url).ping(); }, {at(server.port()), "NOPERM"}, "Right-Pw1");
}

TEST(ClusterErrors, CertificateForAnotherNameIsATlsError) {
  TlsRedisServer wrong({.cert = ServerCert::wrong_name});
  const std::string url =
      "rediss-cluster://" + at(wrong.tls_port()) + "?cacert=" + tls_files().ca_cert + "&" + kFastTimeouts;
  expect_error<TlsError>([&] { Client(url).ping(); }, {at(wrong.tls_port()), "host name mismatch"});
}

// ----------------------------------------------------------------- Sentinel

// A sentinel that requires a password (here a plain server: the handshake
// fails before any SENTINEL command) and a wrong sentinel_password.
TEST(SentinelErrors, SentinelRefusingItsPasswordIsAnAuthError) {
  RedisServer sentinel({.requirepass = "Sentinel-Pw1"});
  ConnectionOptions options =
      ConnectionOptions::from_url("redis-sentinel://" + at(sentinel.port()) + "?" + kFastTimeouts + "#mymaster");
  options.sentinel_password = "Bad-Sentinel-Pw2";
  expect_error<AuthError>([&] { Client(options).ping(); }, {at(sentinel.port()), "WRONGPASS", "mymaster"},
                          "Bad-Sentinel-Pw2");
}

// Every sentinel names the master, which refuses the URL's credentials.
TEST(SentinelErrors, MasterRefusingThePasswordIsAnAuthError) {
  SentinelSet set;
  set.master().command({"ACL", "SETUSER", "locker", "on", ">Right-Pw1", "~*", "&*", "+@all"});
  std::string url = set.url("?" + kFastTimeouts);
  url.insert(url.find("://") + 3, "locker:Bad-Pw2@");
  expect_error<AuthError>([&] { Client(url).ping(); }, {at(set.master().port()), "WRONGPASS", "mymaster"}, "Bad-Pw2");
  // The right password reaches the master through the same sentinels.
  std::string right = set.url("?" + kFastTimeouts);
  right.insert(right.find("://") + 3, "locker:Right-Pw1@");
  EXPECT_EQ(Client(right).command({"ACL", "WHOAMI"}).as_string(), "locker");
}

TEST(SentinelErrors, SentinelCertificateForAnotherNameIsATlsError) {
  TlsRedisServer wrong({.cert = ServerCert::wrong_name});
  const std::string url = "rediss-sentinel://" + at(wrong.tls_port()) + "?cacert=" + tls_files().ca_cert + "&" +
                          kFastTimeouts + "#mymaster";
  expect_error<TlsError>([&] { Client(url).ping(); }, {at(wrong.tls_port()), "host name mismatch"});
}

}  // namespace
}  // namespace lockon::test
