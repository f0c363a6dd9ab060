// TLS on OpenSSL 3, internal to the client layer (OpenSSL never appears in
// include/lockon). The transport itself is reached through
// open_tls_transport() (transport.hpp); this header shares the pieces
// between tls_context.cpp (contexts, the socket BIO) and tls_transport.cpp.
#pragma once

#include <openssl/ssl.h>

#include <string>
#include <string_view>

#include "lockon/options.hpp"

namespace lockon::detail {

/// The SSL_CTX for `tls`, built once per distinct set of settings (CA, client
/// certificate, insecure) per process and cached for the process's life:
/// building one reads files and, with the system store, parses hundreds of
/// certificates (milliseconds), far more than a handshake's CPU. Thread-safe.
/// Throws TlsError naming the file that cannot be used (never its contents),
/// prefixed with "connect on <endpoint>: ".
SSL_CTX* tls_context(const TlsOptions& tls, std::string_view endpoint);

/// A BIO on a non-blocking socket that sends with MSG_NOSIGNAL, so a write to
/// a connection the server reset returns EPIPE instead of killing the process
/// with SIGPIPE. OpenSSL's own socket BIO uses write(2), which raises it; the
/// alternatives are process-wide (ignoring SIGPIPE is the application's
/// call, not a library's) or cost two system calls per write (blocking it
/// per thread around SSL_write and draining it with sigtimedwait, as libcurl
/// does). The BIO also remembers the first byte the server sent: a TLS
/// server's first record is a handshake (0x16) or an alert (0x15), anything
/// else means the port does not speak TLS. Does not own the fd.
BIO* new_socket_bio(int fd);

/// Whether reads through `bio` block (recv without MSG_DONTWAIT, bounded by
/// the socket's SO_RCVTIMEO): the TLS read_within's one-system-call wait,
/// as the plain socket's. Writes never block.
void set_blocking_reads(BIO* bio, bool blocking) noexcept;

/// The first byte read through `bio` (-1: nothing read yet).
int first_byte_received(BIO* bio) noexcept;

/// Prefix of an IoStatus::detail for a session the server refused during or
/// right after the handshake (a TLS 1.3 server checks the client certificate
/// after the client considers the handshake done, so the refusal arrives with
/// the first read). Nothing sent over such a session reached Redis; the error
/// map turns it into a TlsError whatever the phase.
inline constexpr std::string_view kTlsRefusedPrefix = "TLS session refused by the server: ";

}  // namespace lockon::detail
