// SSL_CTX cache and the MSG_NOSIGNAL socket BIO (see tls_transport.hpp).
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "client/tls_transport.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

// ------------------------------------------------------------ socket BIO

struct BioState {
  int fd = -1;
  int first_byte = -1;
  bool blocking_reads = false;
};

BioState* state_of(BIO* bio) noexcept { return static_cast<BioState*>(BIO_get_data(bio)); }

int bio_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  while (true) {
    const ssize_t n = ::send(state_of(bio)->fd, data, static_cast<std::size_t>(size), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return -1;  // errno stays set: SSL_ERROR_SYSCALL reports it
  }
}

int bio_read(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  BioState* state = state_of(bio);
  while (true) {
    const ssize_t n = ::recv(state->fd, data, static_cast<std::size_t>(size), state->blocking_reads ? 0 : MSG_DONTWAIT);
    if (n > 0 && state->first_byte < 0) state->first_byte = static_cast<unsigned char>(data[0]);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return -1;
  }
}

int bio_puts(BIO* bio, const char* text) { return bio_write(bio, text, static_cast<int>(std::char_traits<char>::length(text))); }

long bio_ctrl(BIO* /*bio*/, int command, long /*number*/, void* /*pointer*/) {
  // FLUSH must succeed (the socket has no user-space buffer); everything else
  // (kTLS, datagram controls...) is "not supported".
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* bio) {
  BIO_set_data(bio, new BioState{});
  BIO_set_init(bio, 1);
  return 1;
}

int bio_destroy(BIO* bio) {
  delete state_of(bio);
  BIO_set_data(bio, nullptr);
  return 1;
}

BIO_METHOD* socket_bio_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "lockon socket");
    if (made == nullptr) return made;
    BIO_meth_set_write(made, bio_write);
    BIO_meth_set_read(made, bio_read);
    BIO_meth_set_puts(made, bio_puts);
    BIO_meth_set_ctrl(made, bio_ctrl);
    BIO_meth_set_create(made, bio_create);
    BIO_meth_set_destroy(made, bio_destroy);
    return made;
  }();
  return method;
}

// ------------------------------------------------------------ contexts

struct ContextFree {
  void operator()(SSL_CTX* context) const noexcept { SSL_CTX_free(context); }
};
using ContextPtr = std::unique_ptr<SSL_CTX, ContextFree>;

// What makes two contexts differ. SNI and the verified name are per session.
using ContextKey = std::tuple<std::string, std::string, std::string, std::string, bool>;

struct ContextCache {
  std::mutex mutex;
  std::map<ContextKey, ContextPtr> contexts;
};

ContextCache& cache() {
  static ContextCache* const instance = new ContextCache;  // outlives every static Client
  return *instance;
}

[[noreturn]] void settings_failed(std::string_view endpoint, const std::string& what) {
  ERR_clear_error();
  throw TlsError("connect on " + std::string(endpoint) + ": TLS settings unusable: " + what);
}

ContextPtr build_context(const TlsOptions& tls, std::string_view endpoint) {
  ERR_clear_error();
  ContextPtr context(SSL_CTX_new(TLS_client_method()));
  if (!context) settings_failed(endpoint, "cannot create an OpenSSL context");
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  // A killed server is an EOF without close_notify; it reads as "closed"
  // like on a plain socket (Redis replies are self-delimiting, so there is
  // no truncation attack to detect).
  SSL_CTX_set_options(context.get(), SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
  // Partial writes: write_some may move part of a buffer, as on a socket.
  // Moving buffer: the retry after WANT_WRITE passes the same bytes, maybe
  // from another address (the connection's buffer may have grown).
  SSL_CTX_set_mode(context.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (tls.insecure) {
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
    if (tls.cacert.empty() && tls.cacertdir.empty()) {
      if (SSL_CTX_set_default_verify_paths(context.get()) != 1) settings_failed(endpoint, "cannot load the system's CA store");
    } else if (SSL_CTX_load_verify_locations(context.get(), tls.cacert.empty() ? nullptr : tls.cacert.c_str(),
                                             tls.cacertdir.empty() ? nullptr : tls.cacertdir.c_str()) != 1) {
      settings_failed(endpoint, "cannot load CA certificates from " +
                                    (tls.cacert.empty() ? "cacertdir '" + tls.cacertdir + "'" : "cacert '" + tls.cacert + "'"));
    }
  }
  if (tls.cert.empty() != tls.key.empty())
    settings_failed(endpoint, "a client certificate needs both cert and key");
  if (!tls.cert.empty()) {
    if (SSL_CTX_use_certificate_chain_file(context.get(), tls.cert.c_str()) != 1)
      settings_failed(endpoint, "cannot load the client certificate (cert) from '" + tls.cert + "'");
    if (SSL_CTX_use_PrivateKey_file(context.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
      const unsigned long code = ERR_peek_last_error();
      if (ERR_GET_LIB(code) == ERR_LIB_X509 && ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
        settings_failed(endpoint, "the private key '" + tls.key + "' does not match the certificate '" + tls.cert + "'");
      settings_failed(endpoint, "cannot load the private key (key) from '" + tls.key + "'");
    }
    if (SSL_CTX_check_private_key(context.get()) != 1)
      settings_failed(endpoint, "the private key '" + tls.key + "' does not match the certificate '" + tls.cert + "'");
  }
  return context;
}

}  // namespace

BIO* new_socket_bio(int fd) {
  BIO_METHOD* method = socket_bio_method();
  BIO* bio = method == nullptr ? nullptr : BIO_new(method);
  if (bio != nullptr) state_of(bio)->fd = fd;
  return bio;
}

void set_blocking_reads(BIO* bio, bool blocking) noexcept { state_of(bio)->blocking_reads = blocking; }

int first_byte_received(BIO* bio) noexcept { return bio == nullptr ? -1 : state_of(bio)->first_byte; }

SSL_CTX* tls_context(const TlsOptions& tls, std::string_view endpoint) {
  ContextKey key{tls.cacert, tls.cacertdir, tls.cert, tls.key, tls.insecure};
  ContextCache& contexts = cache();
  {
    std::lock_guard lock(contexts.mutex);
    if (auto found = contexts.contexts.find(key); found != contexts.contexts.end()) return found->second.get();
  }
  // Built outside the lock: loading the system store takes milliseconds and
  // must not hold up connections using other, already built contexts. Two
  // threads may build the same one; the first stored wins.
  ContextPtr built = build_context(tls, endpoint);
  std::lock_guard lock(contexts.mutex);
  auto [slot, inserted] = contexts.contexts.try_emplace(std::move(key), std::move(built));
  return slot->second.get();
}

}  // namespace lockon::detail
