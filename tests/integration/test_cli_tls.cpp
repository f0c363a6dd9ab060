// integration/test_cli_tls.cpp — the `lockon` tool over TLS: rediss:// URLs
// with --cacert, --cert/--key (mutual TLS), --sni and --insecure against a
// real `redis-server --tls-port`, and the exit statuses of TLS failures.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/cli_support.hpp"
#include "support/process.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

TlsServerOptions tls_server(bool auth_clients = false) {
  TlsServerOptions options;
  options.auth_clients = auth_clients ? "yes" : "no";
  options.base.requirepass = "cli-s3cret";
  return options;
}

/// rediss://:cli-s3cret@127.0.0.1:<tls port>, without query parameters.
std::string tls_url(const TlsRedisServer& server) {
  return "rediss://:cli-s3cret@127.0.0.1:" + std::to_string(server.tls_port());
}

TEST(CliTls, RunHoldsTheLockOverRedissWithCacert) {
  TlsRedisServer server(tls_server());
  // COMMAND checks, through the plaintext port, that the lock key exists.
  const std::string check = "redis-cli -p " + std::to_string(server.plain_port()) +
                            " -a cli-s3cret --no-auth-warning EXISTS cli-tls-lock | grep -qx 1";
  const auto result = lockon({"run", "--url", tls_url(server), "--cacert", tls_files().ca_cert, "cli-tls-lock",
                              "--", "sh", "-c", check});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(server.server().command({"EXISTS", "cli-tls-lock"}).integer, 0);  // released
  EXPECT_EQ(result.err.find("cli-s3cret"), std::string::npos) << result.err;
}

TEST(CliTls, MutualTlsWithCertAndKeyAndStatus) {
  TlsRedisServer server(tls_server(/*auth_clients=*/true));
  const TlsFiles& certs = tls_files();
  const std::vector<std::string> tls{"--url", tls_url(server), "--cacert", certs.ca_cert,
                                     "--cert", certs.client_cert, "--key", certs.client_key};
  std::vector<std::string> run{"run"};
  run.insert(run.end(), tls.begin(), tls.end());
  run.insert(run.end(), {"cli-mtls", "--", "true"});
  const auto ran = lockon(run);
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  std::vector<std::string> status{"status", "cli-mtls"};
  status.insert(status.end(), tls.begin(), tls.end());
  const auto shown = lockon(status);
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  // Without the client certificate the server refuses the session.
  const auto refused = lockon({"run", "--url", tls_url(server), "--cacert", certs.ca_cert, "cli-mtls", "--", "true"});
  EXPECT_EQ(refused.exit_code, kUnavailable) << refused.err;
  EXPECT_NE(refused.err.find("requires a client certificate"), std::string::npos) << refused.err;
}

TEST(CliTls, UnknownCaFailsUnlessInsecure) {
  TlsRedisServer server(tls_server());
  // No --cacert: the system store does not know the test CA.
  const auto failed = lockon({"run", "--url", tls_url(server), "cli-ca", "--", "true"});
  EXPECT_EQ(failed.exit_code, kUnavailable) << failed.err;
  EXPECT_NE(failed.err.find("unknown CA"), std::string::npos) << failed.err;
  EXPECT_EQ(failed.err.find("cli-s3cret"), std::string::npos) << failed.err;
  const auto insecure = lockon({"run", "--url", tls_url(server), "--insecure", "cli-ca", "--", "true"});
  EXPECT_EQ(insecure.exit_code, 0) << insecure.err;
  // --sni names what the certificate must carry.
  const auto wrong = lockon({"run", "--url", tls_url(server), "--cacert", tls_files().ca_cert, "--sni",
                             "other.example", "cli-ca", "--", "true"});
  EXPECT_EQ(wrong.exit_code, kUnavailable) << wrong.err;
  EXPECT_NE(wrong.err.find("name mismatch"), std::string::npos) << wrong.err;
}

TEST(CliTls, TlsFlagsWithAPlaintextUrlAreAUsageError) {
  const auto result = lockon({"run", "--url", "redis://127.0.0.1:1", "--cacert", "/ca.pem", "x", "--", "true"});
  EXPECT_EQ(result.exit_code, kUsage) << result.err;
  EXPECT_NE(result.err.find("need a rediss:// URL"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace lockon::test
