// support/tls_certs.cpp — see tls_certs.hpp.
#include "support/tls_certs.hpp"

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

void openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ProcessResult result = run_process(argv, 30s);
  if (result.exit_code != 0) {
    std::string command;
    for (const auto& word : argv) command += word + " ";
    throw std::runtime_error("test certificates: `" + command + "` failed: " + result.out + result.err);
  }
}

const std::vector<std::string> kNewKey{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"};

void make_ca(const std::filesystem::path& dir, const std::string& name, const std::string& subject) {
  std::vector<std::string> args{"req", "-x509", "-new"};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  args.insert(args.end(), {"-keyout", (dir / (name + ".key")).string(), "-out", (dir / (name + ".crt")).string(),
                           "-days", "3650", "-subj", subject});
  openssl(args);
}

/// A leaf certificate `name` signed by CA `ca`, with `extensions` (one
/// openssl config line, e.g. a subjectAltName) valid for `days` (-1: expired).
void make_leaf(const std::filesystem::path& dir, const std::string& name, const std::string& ca,
               const std::string& subject, const std::string& extensions, const std::string& days) {
  const std::string csr = (dir / (name + ".csr")).string();
  const std::string ext = (dir / (name + ".ext")).string();
  std::vector<std::string> args{"req", "-new"};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  args.insert(args.end(), {"-keyout", (dir / (name + ".key")).string(), "-out", csr, "-subj", subject});
  openssl(args);
  std::ofstream(ext) << extensions << "\n";
  openssl({"x509", "-req", "-in", csr, "-CA", (dir / (ca + ".crt")).string(), "-CAkey", (dir / (ca + ".key")).string(),
           "-CAcreateserial", "-out", (dir / (name + ".crt")).string(), "-days", days, "-extfile", ext});
}

}  // namespace

const TlsCerts& TlsCerts::get() {
  static const TlsCerts certs;  // thread-safe initialization
  return certs;
}

TlsCerts::TlsCerts() : dir_(make_temp_dir("lockon-certs")) {
  const std::string server_names = "subjectAltName=DNS:localhost,IP:127.0.0.1";
  make_ca(dir_, "ca", "/CN=lockon test CA");
  make_ca(dir_, "client-ca", "/CN=lockon test client CA");
  make_ca(dir_, "untrusted-ca", "/CN=lockon untrusted CA");
  make_leaf(dir_, "server", "ca", "/CN=localhost", server_names, "3650");
  make_leaf(dir_, "expired", "ca", "/CN=localhost", server_names, "-1");
  make_leaf(dir_, "wrong-name", "ca", "/CN=wrong.example", "subjectAltName=DNS:wrong.example", "3650");
  make_leaf(dir_, "untrusted", "untrusted-ca", "/CN=localhost", server_names, "3650");
  make_leaf(dir_, "client", "client-ca", "/CN=lockon test client", "extendedKeyUsage=clientAuth", "3650");
}

TlsCerts::~TlsCerts() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace lockon::test
