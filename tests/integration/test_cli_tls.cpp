// integration/test_cli_tls.cpp — the `lockon` tool over TLS: rediss:// URLs
// with --cacert, --cert/--key (mutual TLS), --sni and --insecure against a
// real `redis-server --tls-port`, and the exit statuses of TLS failures.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/process.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

const std::string kLockon = LOCKON_CLI;
constexpr int kUsage = 64;
constexpr int kUnavailable = 69;

ProcessResult lockon(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 20s) {
  std::vector<std::string> argv{kLockon};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, timeout);
}

ServerOptions tls_server(bool auth_clients = false) {
  const TlsCerts& certs = TlsCerts::get();
  ServerOptions options;
  options.requirepass = "cli-s3cret";
  options.tls = {.cert_file = certs.server().cert, .key_file = certs.server().key,
                 .ca_file = certs.client_ca_file(), .auth_clients = auth_clients};
  return options;
}

TEST(CliTls, RunHoldsTheLockOverRedissWithCacert) {
  RedisServer server(tls_server());
  // COMMAND checks, through the plaintext port, that the lock key exists.
  const std::string check = "redis-cli -p " + std::to_string(server.port()) +
                            " -a cli-s3cret --no-auth-warning EXISTS cli-tls-lock | grep -qx 1";
  const auto result = lockon({"run", "--url", server.tls_url(), "--cacert", TlsCerts::get().ca_file(), "cli-tls-lock",
                              "--", "sh", "-c", check});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(server.command({"EXISTS", "cli-tls-lock"}).integer, 0);  // released
  EXPECT_EQ(result.err.find("cli-s3cret"), std::string::npos) << result.err;
}

TEST(CliTls, MutualTlsWithCertAndKeyAndStatus) {
  RedisServer server(tls_server(/*auth_clients=*/true));
  const TlsCerts& certs = TlsCerts::get();
  const std::vector<std::string> tls{"--url", server.tls_url(), "--cacert", certs.ca_file(),
                                     "--cert", certs.client().cert, "--key", certs.client().key};
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
  const auto refused = lockon({"run", "--url", server.tls_url(), "--cacert", certs.ca_file(), "cli-mtls", "--", "true"});
  EXPECT_EQ(refused.exit_code, kUnavailable) << refused.err;
  EXPECT_NE(refused.err.find("client certificate required"), std::string::npos) << refused.err;
}

TEST(CliTls, UnknownCaFailsUnlessInsecure) {
  RedisServer server(tls_server());
  // No --cacert: the system store does not know the test CA.
  const auto failed = lockon({"run", "--url", server.tls_url(), "cli-ca", "--", "true"});
  EXPECT_EQ(failed.exit_code, kUnavailable) << failed.err;
  EXPECT_NE(failed.err.find("unknown CA"), std::string::npos) << failed.err;
  EXPECT_EQ(failed.err.find("cli-s3cret"), std::string::npos) << failed.err;
  const auto insecure = lockon({"run", "--url", server.tls_url(), "--insecure", "cli-ca", "--", "true"});
  EXPECT_EQ(insecure.exit_code, 0) << insecure.err;
  // --sni names what the certificate must carry.
  const auto wrong = lockon({"run", "--url", server.tls_url(), "--cacert", TlsCerts::get().ca_file(), "--sni",
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
