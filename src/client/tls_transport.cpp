// The TLS transport: OpenSSL 3 over a connected non-blocking TCP socket.
// The handshake runs here, bounded by the connect deadline; failures are
// described by what failed (unknown CA, name mismatch, expired, client
// certificate required, not a TLS port) because "handshake failure" alone
// sends people hunting.
#include "client/tls_transport.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <fcntl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "client/transport.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = Transport::Clock;

bool is_ip_literal(const std::string& host) {
  unsigned char address[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), address) == 1 || ::inet_pton(AF_INET6, host.c_str(), address) == 1;
}

std::string openssl_reason(unsigned long code) {
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  // "error:0A000086:SSL routines::certificate verify failed" -> the reason.
  const char* reason = std::strrchr(text, ':');
  return reason != nullptr && reason[1] != '\0' ? std::string(reason + 1) : std::string(text);
}

/// Why a fatal SSL_ERROR_SSL/SYSCALL happened, in words an operator can act
/// on. `during_handshake`: the client had not finished its handshake yet.
std::string describe_failure(SSL* ssl, int ssl_error, int saved_errno, bool during_handshake, bool has_client_cert,
                             const std::string& name) {
  const int first = first_byte_received(SSL_get_rbio(ssl));
  // A TLS server's first bytes are a handshake (0x16) or alert (0x15)
  // record; a plaintext Redis answers the ClientHello with "-ERR ...".
  if (first >= 0 && first != 0x16 && first != 0x15)
    return "the server does not speak TLS (plaintext port?): its first byte was not a TLS record";
  const long verify = SSL_get_verify_result(ssl);
  if (during_handshake && verify != X509_V_OK) {
    const std::string detail = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify);
    switch (verify) {
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        return "unknown CA: " + detail + " (trust its CA with cacert/cacertdir)";
      case X509_V_ERR_HOSTNAME_MISMATCH:
      case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return "name mismatch: the server's certificate does not name '" + name + "' (" + detail + ")";
      case X509_V_ERR_CERT_HAS_EXPIRED:
        return "expired: the server's certificate has expired (" + detail + ")";
      case X509_V_ERR_CERT_NOT_YET_VALID:
        return "not yet valid: the server's certificate is not valid yet (" + detail + ")";
      default:
        return detail;
    }
  }
  const unsigned long code = ERR_peek_last_error();
  if (code != 0 && ERR_GET_LIB(code) == ERR_LIB_SSL) {
    const int reason = ERR_GET_REASON(code);
    if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED)
      return "client certificate required: the server demands one (set cert and key)";
    if (reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE && !has_client_cert)
      return "handshake failure alert from the server (does it require a client certificate? set cert and key)";
    if (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE || reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
        reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN || reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR)
      return "the server rejected the client certificate (" + openssl_reason(code) + ")";
    if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG)
      return "the server does not speak TLS (plaintext port?): " + openssl_reason(code);
    if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING && during_handshake)
      return "the server closed the connection during the TLS handshake";
    return openssl_reason(code);
  }
  if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0) return std::strerror(saved_errno);
  if (during_handshake) return "the server closed the connection during the TLS handshake";
  return "TLS failure (SSL error " + std::to_string(ssl_error) + ")";
}

class TlsTransport final : public Transport {
 public:
  TlsTransport(int fd, SSL* ssl, bool has_client_cert, bool cert_requested) noexcept
      : fd_(fd),
        ssl_(ssl),
        owner_(::getpid()),
        has_client_cert_(has_client_cert),
        refusal_possible_(cert_requested && !has_client_cert) {
    // As the plain socket transport: the socket itself blocks, every
    // non-blocking operation passes MSG_DONTWAIT (the BIO does), so
    // read_within can wait inside recv() with SO_RCVTIMEO.
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  }

  ~TlsTransport() override {
    // close_notify is best effort: one non-blocking attempt. Never after a
    // fatal error (OpenSSL forbids it), never in a forked child holding a
    // copy of the parent's session (it would end the parent's stream).
    if (!broken_ && owner_ == ::getpid()) {
      ERR_clear_error();
      SSL_shutdown(ssl_);
    }
    ERR_clear_error();
    SSL_free(ssl_);
    ::close(fd_);
  }

  int fd() const noexcept override { return fd_; }

  IoStatus read_some(char* data, std::size_t size) noexcept override {
    ERR_clear_error();
    std::size_t moved = 0;
    if (SSL_read_ex(ssl_, data, size, &moved) == 1) {
      refusal_possible_ = false;  // the server accepted the session
      return IoStatus{.bytes = moved};
    }
    return failure(SSL_get_error(ssl_, 0), errno);
  }

  IoStatus write_some(const char* data, std::size_t size) noexcept override {
    ERR_clear_error();
    std::size_t moved = 0;
    if (SSL_write_ex(ssl_, data, size, &moved) == 1) return IoStatus{.bytes = moved};
    return failure(SSL_get_error(ssl_, 0), errno);
  }

  /// One blocking SSL_read: each recv() under it waits up to `timeout`
  /// (SO_RCVTIMEO) instead of read + poll + read, saving two system calls
  /// per reply on the hot path. A record's body follows its header at once,
  /// so in practice the wait is one timeout (at worst two).
  IoStatus read_within(char* data, std::size_t size, std::chrono::milliseconds timeout) noexcept override {
    if (SSL_pending(ssl_) > 0) return read_some(data, size);
    if (timeout != receive_timeout_) {
      timeval tv{};
      tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
      tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
      if (::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) return IoStatus{.error = errno};
      receive_timeout_ = timeout;
    }
    BIO* bio = SSL_get_rbio(ssl_);
    set_blocking_reads(bio, true);
    IoStatus status = read_some(data, size);
    set_blocking_reads(bio, false);
    return status;
  }

  bool has_buffered_input() const noexcept override { return SSL_pending(ssl_) > 0; }
  std::string_view kind() const noexcept override { return "tls"; }

 private:
  IoStatus failure(int ssl_error, int saved_errno) noexcept {
    switch (ssl_error) {
      case SSL_ERROR_WANT_READ:
        return IoStatus{.want = Want::read};
      case SSL_ERROR_WANT_WRITE:
        return IoStatus{.want = Want::write};
      case SSL_ERROR_ZERO_RETURN:
        if (!refusal_possible_) return IoStatus{.closed = true};
        break;
      default:
        break;
    }
    broken_ = true;
    if (refusal_possible_ && ERR_peek_last_error() == 0) {
      // The server asked for a client certificate, we had none, and it ended
      // the connection before a single reply: under TLS 1.3 it decides after
      // our handshake is done, and its alert may be lost to the reset that
      // follows (our requests were unread). Say what it almost surely was.
      ERR_clear_error();
      return IoStatus{.error = 0,
                      .detail = std::string(kTlsRefusedPrefix) +
                                "client certificate required: the server asked for one, none is set (cert and key), "
                                "and it closed the connection"};
    }
    try {
      const unsigned long code = ERR_peek_last_error();
      // A TLS 1.3 server refuses a client certificate only after our side of
      // the handshake is done: the alert arrives with the first read.
      const bool refused = code != 0 && ERR_GET_LIB(code) == ERR_LIB_SSL && ERR_GET_REASON(code) >= SSL_AD_REASON_OFFSET;
      std::string detail = describe_failure(ssl_, ssl_error, saved_errno, false, has_client_cert_, {});
      if (refused) detail.insert(0, kTlsRefusedPrefix);
      ERR_clear_error();
      if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0 && !refused) return IoStatus{.error = saved_errno};
      return IoStatus{.error = 0, .detail = std::move(detail)};
    } catch (...) {  // no memory for the message
      ERR_clear_error();
      return IoStatus{.error = ENOMEM};
    }
  }

  int fd_;
  SSL* ssl_;
  pid_t owner_;
  bool has_client_cert_;
  // The server asked for a client certificate that we do not have, and has
  // not yet accepted the session (no reply read yet).
  bool refusal_possible_;
  bool broken_ = false;
  std::chrono::milliseconds receive_timeout_{0};  // SO_RCVTIMEO now set (0: none)
};

/// Notes a CertificateRequest from the server (msg callback, handshake only).
void note_certificate_request(int write_p, int /*version*/, int content_type, const void* buf, std::size_t len,
                              SSL* /*ssl*/, void* arg) {
  if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_MT_CERTIFICATE_REQUEST)
    *static_cast<bool*>(arg) = true;
}

struct SslFree {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};

}  // namespace

std::unique_ptr<Transport> open_tls_transport(int fd, const ConnectionOptions& options, const std::string& host,
                                              Clock::time_point deadline, std::string_view endpoint) {
  struct FdGuard {
    int fd;
    ~FdGuard() {
      if (fd >= 0) ::close(fd);
    }
  } guard{fd};
  const auto fail = [&](const std::string& what) -> void {
    ERR_clear_error();
    throw TlsError("connect on " + std::string(endpoint) + ": TLS handshake failed: " + what);
  };
  const TlsOptions& tls = options.tls;
  SSL_CTX* context = tls_context(tls, endpoint);
  ERR_clear_error();
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(context));
  BIO* bio = ssl ? new_socket_bio(fd) : nullptr;
  if (!bio) fail("cannot allocate a TLS session");
  SSL_set_bio(ssl.get(), bio, bio);  // the session owns the BIO now

  // The name the certificate must carry: sni when given, else the host.
  const std::string& name = tls.sni.empty() ? host : tls.sni;
  if (!tls.insecure) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const bool ok = is_ip_literal(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1
                                        : SSL_set1_host(ssl.get(), name.c_str()) == 1;
    if (!ok) fail("cannot check the certificate against '" + name + "'");
  }
  // SNI carries host names only (RFC 6066 forbids IP literals).
  // (SSL_set_tlsext_host_name, without the macro's old-style cast.)
  if (!is_ip_literal(name) && SSL_ctrl(ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                                       const_cast<char*>(name.c_str())) != 1)
    fail("cannot set the server name (sni) '" + name + "'");

  const bool has_client_cert = !tls.cert.empty();
  bool cert_requested = false;
  SSL_set_msg_callback(ssl.get(), note_certificate_request);
  SSL_set_msg_callback_arg(ssl.get(), &cert_requested);
  while (true) {
    ERR_clear_error();
    const int rc = SSL_connect(ssl.get());
    if (rc == 1) break;
    const int saved_errno = errno;
    const int error = SSL_get_error(ssl.get(), rc);
    Want want = Want::nothing;
    if (error == SSL_ERROR_WANT_READ) want = Want::read;
    else if (error == SSL_ERROR_WANT_WRITE) want = Want::write;
    if (want == Want::nothing) fail(describe_failure(ssl.get(), error, saved_errno, true, has_client_cert, name));
    // wait_ready needs a Transport; poll the socket directly instead.
    struct Probe final : Transport {
      int socket;
      explicit Probe(int s) : socket(s) {}
      int fd() const noexcept override { return socket; }
      IoStatus read_some(char*, std::size_t) noexcept override { return {}; }
      IoStatus write_some(const char*, std::size_t) noexcept override { return {}; }
      std::string_view kind() const noexcept override { return "tcp"; }
    } probe(fd);
    if (!wait_ready(probe, want, deadline)) {
      ERR_clear_error();
      if (first_byte_received(bio) < 0) {
        // Not a byte back. A plaintext Redis never answers a ClientHello: it
        // reads it as an inline command whose line end it looks for with
        // strchr, which stops at the NUL in the hello's 3rd-5th bytes, so it
        // waits for more. It cannot be told from a stalled TLS server without
        // sending plaintext, so the message names both. TlsError: the TLS
        // handshake is what failed (still a ConnectError: nothing was sent).
        throw TlsError("connect on " + std::string(endpoint) +
                       ": TLS handshake timed out: the server sent nothing back (does the server not speak TLS "
                       "(plaintext port?), or is it stalled?)");
      }
      throw ConnectError("connect on " + std::string(endpoint) + ": TLS handshake timed out");
    }
  }
  SSL_set_msg_callback(ssl.get(), nullptr);  // its argument lives on this stack
  SSL_set_msg_callback_arg(ssl.get(), nullptr);
  guard.fd = -1;
  return std::make_unique<TlsTransport>(fd, ssl.release(), has_client_cert, cert_requested);
}

}  // namespace lockon::detail
