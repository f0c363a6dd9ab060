// support/tls_certs.hpp — test certificates, made with the `openssl` command
// once per process into a temporary directory (removed at exit).
//
//   ca            the trusted CA (pass ca_file() as cacert)
//   server        signed by ca, names localhost and 127.0.0.1
//   expired       as server, but expired yesterday
//   wrong_name    signed by ca, names only wrong.example
//   untrusted     names localhost and 127.0.0.1, signed by another CA
//   client        a client certificate signed by client_ca (mutual TLS)
//
// EC P-256 keys: generating them is instant, unlike RSA. Throws
// std::runtime_error with openssl's output when a step fails.
#pragma once

#include <filesystem>
#include <string>

namespace lockon::test {

struct CertPair {
  std::string cert;
  std::string key;
};

class TlsCerts {
 public:
  /// The process's certificates, made on first use. Thread-safe.
  static const TlsCerts& get();

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::string ca_file() const { return (dir_ / "ca.crt").string(); }
  std::string client_ca_file() const { return (dir_ / "client-ca.crt").string(); }
  std::string untrusted_ca_file() const { return (dir_ / "untrusted-ca.crt").string(); }
  CertPair server() const { return pair("server"); }
  CertPair expired() const { return pair("expired"); }
  CertPair wrong_name() const { return pair("wrong-name"); }
  CertPair untrusted() const { return pair("untrusted"); }
  CertPair client() const { return pair("client"); }

  TlsCerts(const TlsCerts&) = delete;
  TlsCerts& operator=(const TlsCerts&) = delete;
  ~TlsCerts();

 private:
  TlsCerts();
  CertPair pair(const std::string& name) const {
    return {(dir_ / (name + ".crt")).string(), (dir_ / (name + ".key")).string()};
  }
  std::filesystem::path dir_;
};

}  // namespace lockon::test
