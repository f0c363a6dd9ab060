// TLS over a connected TCP socket, on OpenSSL 3 (hiredis 0.14 has no TLS).
//
// One SSL_CTX per distinct TlsOptions per process, built once and shared by
// every connection (loading a CA store costs milliseconds; a pool's
// reconnects must not pay it). Verification is on unless `insecure`: the
// chain against cacert / cacertdir / the system store, and the host name
// (or IP address) the connection goes to, or `sni` when set.
//
// The socket is non-blocking and every OpenSSL call is bounded by the
// caller's deadline through wait_ready(). OpenSSL talks to the socket
// through a small BIO of ours that uses send(MSG_NOSIGNAL): its own socket
// BIO calls write(), which raises SIGPIPE on a reset peer and would kill a
// process that did not ignore it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "client/transport.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = Transport::Clock;

// ------------------------------------------------------------ socket BIO

int bio_fd(BIO* bio) { return static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(bio))); }

int bio_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  while (true) {
    const ssize_t n = ::send(bio_fd(bio), data, static_cast<std::size_t>(size), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return -1;
  }
}

int bio_read(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  while (true) {
    const ssize_t n = ::recv(bio_fd(bio), data, static_cast<std::size_t>(size), MSG_DONTWAIT);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return -1;
  }
}

long bio_ctrl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* socket_method() {
  // Process-lifetime, like OpenSSL's own methods.
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lockon socket");
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

// ------------------------------------------------------------ errors

// The first error in OpenSSL's queue as text ("" if none); clears it.
std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return {};
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

[[noreturn]] void tls_failed(std::string_view endpoint, const std::string& what) {
  throw TlsError("TLS on " + std::string(endpoint) + ": " + what);
}

bool is_ip_literal(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string describe_verify_failure(long result, const std::string& name) {
  switch (result) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return "certificate verify failed: host name mismatch (the server's certificate is not for '" + name +
             "'; set sni to the name it carries)";
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return "certificate verify failed: the server's certificate has expired";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return "certificate verify failed: the server's certificate is not yet valid";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      return std::string("certificate verify failed: unknown CA (") + X509_verify_cert_error_string(result) +
             "; give its CA with cacert)";
    default:
      return std::string("certificate verify failed: ") + X509_verify_cert_error_string(result);
  }
}

// ------------------------------------------------------------ contexts

struct ContextDeleter {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
using ContextPtr = std::shared_ptr<SSL_CTX>;

// Set when a server asked for a client certificate we do not have: its
// refusal (TLS 1.3: an alert after our Finished) is then reported as such.
int requested_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int on_certificate_request(SSL* ssl, X509**, EVP_PKEY**) {
  SSL_set_ex_data(ssl, requested_index(), reinterpret_cast<void*>(1));
  return 0;  // none: the server decides whether that is acceptable
}

// OpenSSL's default pass-phrase callback, asked by an encrypted private key,
// prompts "Enter PEM pass phrase:" on the terminal (without one, on stderr,
// reading stdin) and waits for an answer without a time limit — while
// shared_context() holds the process-wide mutex every TLS connect of the
// process needs. lockon takes no pass phrase: this one refuses at once, and
// notes in `asked` (a bool, when set) that the key wanted one.
int refuse_pass_phrase(char*, int, int, void* asked) {
  if (asked != nullptr) *static_cast<bool*>(asked) = true;
  return 0;  // no pass phrase: the key does not load
}

ContextPtr build_context(const TlsOptions& tls, std::string_view endpoint) {
  ContextPtr ctx(SSL_CTX_new(TLS_client_method()), ContextDeleter{});
  if (!ctx) tls_failed(endpoint, "cannot create a TLS context: " + openssl_error());
  SSL_CTX_set_default_passwd_cb(ctx.get(), refuse_pass_phrase);  // whatever is loaded: never a prompt
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (!tls.insecure) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    if (!tls.cacert.empty() || !tls.cacertdir.empty()) {
      if (SSL_CTX_load_verify_locations(ctx.get(), tls.cacert.empty() ? nullptr : tls.cacert.c_str(),
                                        tls.cacertdir.empty() ? nullptr : tls.cacertdir.c_str()) != 1) {
        tls_failed(endpoint, "cannot load the trusted CA certificates from " +
                                 (tls.cacert.empty() ? "cacertdir '" + tls.cacertdir + "'" : "cacert '" + tls.cacert + "'") +
                                 ": " + openssl_error());
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      tls_failed(endpoint, "cannot load the system's trusted CA certificates: " + openssl_error());
    }
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  }
  if (tls.cert.empty() != tls.key.empty())
    throw ConfigError("TLS on " + std::string(endpoint) + ": cert and key must be given together (mutual TLS)");
  if (!tls.cert.empty()) {
    bool asked_for_pass_phrase = false;
    SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &asked_for_pass_phrase);
    // The context outlives this frame: it must not keep the flag's address.
    struct ForgetFlag {
      SSL_CTX* ctx;
      ~ForgetFlag() { SSL_CTX_set_default_passwd_cb_userdata(ctx, nullptr); }
    } forget_flag{ctx.get()};
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1)
      tls_failed(endpoint, "cannot load the client certificate '" + tls.cert + "': " + openssl_error());
    // The key's contents never reach a message: only its file name.
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      const bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
      ERR_clear_error();
      if (asked_for_pass_phrase)
        tls_failed(endpoint, "cannot load the private key '" + tls.key +
                                 "': it is encrypted (protected by a pass phrase), and encrypted keys are not "
                                 "supported; give a decrypted copy readable only by this user "
                                 "(openssl pkey -in KEY -out PLAIN_KEY)");
      if (mismatch)
        tls_failed(endpoint, "the private key '" + tls.key + "' does not match the certificate '" + tls.cert + "'");
      tls_failed(endpoint, "cannot load the private key '" + tls.key + "'");
    }
    if (SSL_CTX_check_private_key(ctx.get()) != 1)
      tls_failed(endpoint, "the private key '" + tls.key + "' does not match the certificate '" + tls.cert + "'");
    ERR_clear_error();
  } else {
    SSL_CTX_set_client_cert_cb(ctx.get(), on_certificate_request);
  }
  return ctx;
}

ContextPtr shared_context(const TlsOptions& tls, std::string_view endpoint) {
  using Key = std::tuple<std::string, std::string, std::string, std::string, bool>;
  static std::mutex mutex;
  static auto* contexts = new std::map<Key, ContextPtr>();  // process lifetime: threads may outlive statics
  Key key{tls.cacert, tls.cacertdir, tls.cert, tls.key, tls.insecure};
  std::lock_guard lock(mutex);
  auto found = contexts->find(key);
  if (found != contexts->end()) return found->second;
  ContextPtr ctx = build_context(tls, endpoint);
  contexts->emplace(std::move(key), ctx);
  return ctx;
}

// ------------------------------------------------------------ transport

class TlsTransport final : public Transport {
 public:
  TlsTransport(int fd, ContextPtr ctx, SSL* ssl) noexcept : fd_(fd), ctx_(std::move(ctx)), ssl_(ssl) {}
  // No close_notify: it is optional for Redis, and a destructor running in
  // a forked child must not write into the parent's TLS stream.
  ~TlsTransport() override {
    SSL_free(ssl_);
    ::close(fd_);
  }

  int fd() const noexcept override { return fd_; }
  std::string_view kind() const noexcept override { return "tls"; }
  bool has_buffered_input() const noexcept override { return SSL_pending(ssl_) > 0; }

  IoStatus read_some(char* data, std::size_t size) noexcept override {
    ERR_clear_error();
    std::size_t got = 0;
    if (SSL_read_ex(ssl_, data, size, &got) == 1) {
      received_ = true;
      return IoStatus{.bytes = got};
    }
    return failure(SSL_get_error(ssl_, 0));
  }

  IoStatus write_some(const char* data, std::size_t size) noexcept override {
    ERR_clear_error();
    std::size_t put = 0;
    if (SSL_write_ex(ssl_, data, size, &put) == 1) return IoStatus{.bytes = put};
    return failure(SSL_get_error(ssl_, 0));
  }

 private:
  IoStatus failure(int error) noexcept {
    switch (error) {
      case SSL_ERROR_WANT_READ:
        return IoStatus{.want = Want::read};
      case SSL_ERROR_WANT_WRITE:
        return IoStatus{.want = Want::write};
      case SSL_ERROR_ZERO_RETURN:
        return IoStatus{.closed = true};
      case SSL_ERROR_SYSCALL: {
        const int saved = errno;
        // TLS 1.3: a server that requires a client certificate we did not
        // send closes (or resets) right after the handshake.
        if (!received_ && SSL_get_ex_data(ssl_, requested_index()) != nullptr)
          return IoStatus{.detail = "TLS: the server requires a client certificate (set cert and key)"};
        if (saved == 0) return IoStatus{.closed = true};
        return IoStatus{.error = saved};
      }
      default:
        break;
    }
    const unsigned long code = ERR_peek_error();
    if (ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
      ERR_clear_error();
      return IoStatus{.closed = true};
    }
    try {
      if (ERR_GET_REASON(code) == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
        ERR_clear_error();
        return IoStatus{.detail = "TLS: the server requires a client certificate (set cert and key)"};
      }
      std::string text = openssl_error();
      return IoStatus{.detail = "TLS: " + (text.empty() ? std::string("unknown error") : text)};
    } catch (...) {
      return IoStatus{.error = ENOMEM};
    }
  }

  int fd_;
  ContextPtr ctx_;  // keeps the context alive as long as its SSL
  SSL* ssl_;
  bool received_ = false;  // a record was read: the server accepted us
};

std::string handshake_failure(SSL* ssl, int error, const std::string& name, bool verifying) {
  if (verifying) {
    const long result = SSL_get_verify_result(ssl);
    if (result != X509_V_OK) {
      ERR_clear_error();
      return describe_verify_failure(result, name);
    }
  }
  const unsigned long code = ERR_peek_error();
  const int reason = ERR_GET_REASON(code);
  if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING ||
      reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG) {
    // A plaintext Redis answers a ClientHello with an error line (not a TLS
    // record) or closes the connection.
    ERR_clear_error();
    return "handshake failed: the server does not speak TLS (a plaintext port behind rediss://?)";
  }
  if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED || reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
      reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE || reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA) {
    if (SSL_get_ex_data(ssl, requested_index()) != nullptr || reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
      ERR_clear_error();
      return "handshake failed: the server requires a client certificate (set cert and key)";
    }
    if (reason != SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE) {
      ERR_clear_error();
      return "handshake failed: the server rejected our client certificate";
    }
  }
  return "handshake failed: " + openssl_error();
}

}  // namespace

struct TlsHandshake::State {
  int fd = -1;
  ContextPtr ctx;
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl{nullptr, &SSL_free};
  std::string name;
  std::string endpoint;
  bool verifying = false;
  ~State() {
    if (fd >= 0) ::close(fd);
  }
};

TlsHandshake::TlsHandshake(int fd, const ConnectionOptions& options, const std::string& host,
                           std::string_view endpoint)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  st.fd = fd;  // owned from here on, also when this constructor throws
  st.endpoint = std::string(endpoint);
  const TlsOptions& tls = options.tls;
  st.ctx = shared_context(tls, endpoint);
  st.ssl.reset(SSL_new(st.ctx.get()));
  if (!st.ssl) tls_failed(endpoint, "cannot create a TLS session: " + openssl_error());
  BIO* bio = BIO_new(socket_method());
  if (bio == nullptr) tls_failed(endpoint, "cannot create a TLS socket BIO: " + openssl_error());
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)));
  SSL_set_bio(st.ssl.get(), bio, bio);  // the SSL owns the BIO now
  SSL_set_connect_state(st.ssl.get());
  st.name = tls.sni.empty() ? host : tls.sni;
  st.verifying = !tls.insecure;
  const bool ip = is_ip_literal(st.name);
  // SSL_set_tlsext_host_name without its C cast.
  if (!ip && SSL_ctrl(st.ssl.get(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                      const_cast<char*>(st.name.c_str())) != 1)
    tls_failed(endpoint, "cannot set the server name '" + st.name + "': " + openssl_error());
  if (st.verifying) {
    const bool set = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(st.ssl.get()), st.name.c_str()) == 1
                        : SSL_set1_host(st.ssl.get(), st.name.c_str()) == 1;
    if (!set) tls_failed(endpoint, "cannot verify the server name '" + st.name + "': " + openssl_error());
  }
}

TlsHandshake::~TlsHandshake() = default;

int TlsHandshake::fd() const noexcept { return state_->fd; }

Want TlsHandshake::step() {
  State& st = *state_;
  ERR_clear_error();
  const int rc = SSL_connect(st.ssl.get());
  if (rc == 1) return Want::nothing;
  const int error = SSL_get_error(st.ssl.get(), rc);
  if (error == SSL_ERROR_WANT_READ) return Want::read;
  if (error == SSL_ERROR_WANT_WRITE) return Want::write;
  tls_failed(st.endpoint, handshake_failure(st.ssl.get(), error, st.name, st.verifying));
}

std::unique_ptr<Transport> TlsHandshake::finish() {
  State& st = *state_;
  auto transport = std::make_unique<TlsTransport>(st.fd, std::move(st.ctx), st.ssl.get());
  static_cast<void>(st.ssl.release());
  st.fd = -1;
  return transport;
}

void TlsHandshake::timed_out() const {
  // A plaintext Redis reads a ClientHello as the start of an inline
  // command and waits for its end: silence, like a frozen server.
  tls_failed(state_->endpoint, "handshake timed out: the server sent no TLS answer (a plaintext port behind "
                               "rediss://? or a frozen server)");
}

std::unique_ptr<Transport> open_tls_transport(int fd, const ConnectionOptions& options, const std::string& host,
                                              Clock::time_point deadline, std::string_view endpoint) {
  TlsHandshake handshake(fd, options, host, endpoint);
  // The handshake, bounded by the deadline.
  for (Want want = handshake.step(); want != Want::nothing; want = handshake.step()) {
    if (!wait_fd_ready(handshake.fd(), want, deadline)) handshake.timed_out();
  }
  return handshake.finish();
}

}  // namespace lockon::detail
