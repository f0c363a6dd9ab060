// support/tls_certs.hpp — certificates for TLS tests, made with the `openssl`
// command once per process, and redis-servers that speak TLS.
//
// Every file lives in one temporary directory removed at exit. The server
// certificates name "localhost" and 127.0.0.1 (SAN) unless said otherwise.
#pragma once

#include <memory>
#include <string>

#include "support/redis_server.hpp"

namespace lockon::test {

struct TlsFiles {
  std::string dir;
  std::string ca_cert;               // the CA everything below is signed by (unless noted)
  std::string server_cert, server_key;
  std::string expired_cert, expired_key;        // notAfter in the past
  std::string wrong_name_cert, wrong_name_key;  // SAN: other.example only
  std::string other_ca_cert;                     // an unrelated CA
  std::string untrusted_cert, untrusted_key;    // signed by other_ca
  std::string client_cert, client_key;          // a client certificate signed by ca
};

/// Generated on first use (throws std::runtime_error with openssl's output
/// if the command fails).
const TlsFiles& tls_files();

/// Which certificate the server presents.
enum class ServerCert { good, expired, wrong_name, untrusted };

struct TlsServerOptions {
  ServerCert cert = ServerCert::good;
  /// `tls-auth-clients`: "no", "yes" or "optional".
  std::string auth_clients = "no";
  ServerOptions base{};
};

/// A redis-server listening both on a plaintext port (port(), used by the
/// harness to check it is up) and on a TLS port (tls_port()).
class TlsRedisServer {
 public:
  explicit TlsRedisServer(TlsServerOptions options = {});
  ~TlsRedisServer();
  TlsRedisServer(const TlsRedisServer&) = delete;
  TlsRedisServer& operator=(const TlsRedisServer&) = delete;

  RedisServer& server() noexcept { return *server_; }
  int tls_port() const noexcept { return tls_port_; }
  int plain_port() const noexcept { return server_->port(); }
  /// "rediss://127.0.0.1:<tls port>?cacert=<ca>" (query parameters appended
  /// by the caller after "&").
  std::string url() const;
  /// The same without cacert.
  std::string bare_url() const;

 private:
  int tls_port_;
  std::unique_ptr<RedisServer> server_;
};

}  // namespace lockon::test
