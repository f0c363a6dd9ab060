#include "support/tls_certs.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "support/process.hpp"

namespace lockon::test {
namespace {

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult result = run_process(argv, std::chrono::seconds(30));
  if (!result.succeeded()) throw std::runtime_error("openssl failed: " + result.describe());
}

// A key and a certificate signing request for `cn`.
void key_and_request(const std::string& base, const std::string& cn) {
  openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", base + ".key",
           "-out", base + ".csr", "-subj", "/CN=" + cn});
}

void self_signed_ca(const std::string& base, const std::string& cn) {
  openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
           base + ".key", "-out", base + ".crt", "-days", "2", "-subj", "/CN=" + cn});
}

void sign(const std::string& base, const std::string& ca, const std::string& extensions, const std::string& days) {
  openssl({"x509", "-req", "-in", base + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key", "-CAcreateserial", "-out",
           base + ".crt", "-days", days, "-extfile", extensions});
}

struct Cleanup {
  std::string dir;
  ~Cleanup() {
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};

TlsFiles generate() {
  std::string pattern = (std::filesystem::temp_directory_path() / "lockon-tls-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp for TLS certificates failed");
  static Cleanup cleanup;
  cleanup.dir = pattern;
  const std::string d = pattern + "/";
  const std::string local = d + "local.ext";
  const std::string other = d + "other.ext";
  const std::string client = d + "client.ext";
  std::ofstream(local) << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  std::ofstream(other) << "subjectAltName=DNS:other.example\n";
  std::ofstream(client) << "extendedKeyUsage=clientAuth\n";
  self_signed_ca(d + "ca", "lockon test CA");
  self_signed_ca(d + "other-ca", "unrelated CA");
  key_and_request(d + "server", "localhost");
  sign(d + "server", d + "ca", local, "2");
  key_and_request(d + "expired", "localhost");
  sign(d + "expired", d + "ca", local, "-1");
  key_and_request(d + "wrong", "other.example");
  sign(d + "wrong", d + "ca", other, "2");
  key_and_request(d + "untrusted", "localhost");
  sign(d + "untrusted", d + "other-ca", local, "2");
  key_and_request(d + "client", "lockon test client");
  sign(d + "client", d + "ca", client, "2");
  TlsFiles files;
  files.dir = pattern;
  files.ca_cert = d + "ca.crt";
  files.server_cert = d + "server.crt";
  files.server_key = d + "server.key";
  files.expired_cert = d + "expired.crt";
  files.expired_key = d + "expired.key";
  files.wrong_name_cert = d + "wrong.crt";
  files.wrong_name_key = d + "wrong.key";
  files.other_ca_cert = d + "other-ca.crt";
  files.untrusted_cert = d + "untrusted.crt";
  files.untrusted_key = d + "untrusted.key";
  files.client_cert = d + "client.crt";
  files.client_key = d + "client.key";
  return files;
}

}  // namespace

const TlsFiles& tls_files() {
  static std::once_flag once;
  static TlsFiles files;
  std::call_once(once, [] { files = generate(); });
  return files;
}

TlsRedisServer::TlsRedisServer(TlsServerOptions options) : tls_port_(reserve_free_port()) {
  const TlsFiles& f = tls_files();
  std::string cert = f.server_cert;
  std::string key = f.server_key;
  switch (options.cert) {
    case ServerCert::good: break;
    case ServerCert::expired: cert = f.expired_cert; key = f.expired_key; break;
    case ServerCert::wrong_name: cert = f.wrong_name_cert; key = f.wrong_name_key; break;
    case ServerCert::untrusted: cert = f.untrusted_cert; key = f.untrusted_key; break;
  }
  ServerOptions base = options.base;
  const std::vector<std::string> tls_args{"--tls-port", std::to_string(tls_port_), "--tls-cert-file", cert,
                                          "--tls-key-file", key, "--tls-ca-cert-file", f.ca_cert,
                                          "--tls-auth-clients", options.auth_clients};
  base.extra_args.insert(base.extra_args.end(), tls_args.begin(), tls_args.end());
  server_ = std::make_unique<RedisServer>(base);
}

TlsRedisServer::~TlsRedisServer() {
  server_.reset();
  release_free_port(tls_port_);
}

std::string TlsRedisServer::bare_url() const {
  const std::string auth = server_->options().requirepass.empty() ? "" : ":" + server_->options().requirepass + "@";
  return "rediss://" + auth + "127.0.0.1:" + std::to_string(tls_port_);
}

std::string TlsRedisServer::url() const { return bare_url() + "?cacert=" + tls_files().ca_cert; }

}  // namespace lockon::test
