// The byte stream under a Connection: TCP, Unix socket or TLS over TCP.
//
// Every transport is a non-blocking socket. Nothing here waits: read_some()
// and write_some() move what the socket can move now and say what they
// would need to go on (readable or writable; TLS may need to write to read
// and the reverse). The blocking front waits with wait_ready() until a
// deadline; the Asio front waits with a stream_descriptor on fd(). One
// transport serves one thread at a time.
//
// Opening is bounded: open_transport() connects (and for TLS, handshakes
// and verifies) before `deadline` or throws ConnectError (TlsError for a
// certificate or handshake failure) naming the endpoint — never hangs, even
// against a server that accepts and then says nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "lockon/options.hpp"

namespace lockon::detail {

/// What a transport needs before the interrupted operation can go on.
enum class Want { nothing, read, write };

/// The outcome of one read_some/write_some.
struct IoStatus {
  /// Bytes moved (> 0), or 0 with `want` set (would block) or `closed`.
  std::size_t bytes = 0;
  Want want = Want::nothing;
  /// The peer closed the stream (read) — EOF, or a TLS close_notify.
  bool closed = false;
  /// errno of a failure (0: none). A failed transport is unusable.
  int error = 0;
  /// For failures errno cannot describe (TLS): what went wrong, for
  /// messages. Never contains secrets.
  std::string detail{};

  bool failed() const noexcept { return error != 0 || !detail.empty(); }
};

class Transport {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  /// The socket, for poll() and Asio's stream_descriptor. Owned by the
  /// transport; closed with it.
  virtual int fd() const noexcept = 0;
  /// Reads up to `size` bytes. Never blocks.
  virtual IoStatus read_some(char* data, std::size_t size) noexcept = 0;
  /// Writes up to `size` bytes (never raises SIGPIPE). Never blocks.
  virtual IoStatus write_some(const char* data, std::size_t size) noexcept = 0;
  /// Reads up to `size` bytes, waiting up to `timeout` (0: no bound) for the
  /// first. A timeout returns want == Want::read with no bytes. The default
  /// waits with wait_ready(); plain sockets override it with one blocking
  /// recv() bounded by SO_RCVTIMEO (one system call per reply on the hot
  /// path instead of poll + recv).
  virtual IoStatus read_within(char* data, std::size_t size, std::chrono::milliseconds timeout) noexcept;
  /// Whether bytes were already read off the socket and wait in a user-space
  /// buffer (TLS records): read before polling, poll() would not see them.
  virtual bool has_buffered_input() const noexcept { return false; }
  /// "tcp", "unix" or "tls", for messages.
  virtual std::string_view kind() const noexcept = 0;

 protected:
  Transport() = default;
};

/// Opens the transport `options` describe to host:port (or options.unix_path
/// when non-empty and host is empty), connected — and for TLS handshaken and
/// verified — before `deadline`. Throws ConnectError / TlsError naming
/// `endpoint`; nothing has been sent then.
std::unique_ptr<Transport> open_transport(const ConnectionOptions& options, const std::string& host, int port,
                                          Transport::Clock::time_point deadline, std::string_view endpoint);

/// A plain transport over a connected TCP or Unix socket (owned from now
/// on), e.g. one the Asio front connected (async/async_connect.cpp).
/// `kind` ("tcp", "unix") must be a string literal.
std::unique_ptr<Transport> make_socket_transport(int fd, std::string_view kind);

/// Connects a non-blocking TCP socket to host:port (name resolution, every
/// address in turn, TCP_NODELAY, keep-alive if asked) before `deadline`.
/// Returns the fd (owned by the caller). Throws ConnectError naming `endpoint`.
int connect_tcp(const std::string& host, int port, bool keepalive, Transport::Clock::time_point deadline,
                std::string_view endpoint);

/// TLS over an already connected TCP socket (takes ownership of `fd`, also
/// on failure): handshake and verification per options.tls, bounded by
/// `deadline`. `host` is what the certificate must name unless tls.sni is
/// set. Throws TlsError (ConnectError for a timeout) naming `endpoint`.
/// Defined in tls_transport.cpp.
std::unique_ptr<Transport> open_tls_transport(int fd, const ConnectionOptions& options, const std::string& host,
                                              Transport::Clock::time_point deadline, std::string_view endpoint);

/// A TLS handshake driven step by step, for fronts that wait their own way
/// (open_tls_transport() waits with poll(); the async front with a
/// stream_descriptor on fd()). Takes ownership of the connected TCP socket
/// `fd` (closed with this object unless finish() handed it on). Setup
/// failures throw TlsError / ConfigError naming `endpoint`. Defined in
/// tls_transport.cpp.
class TlsHandshake {
 public:
  TlsHandshake(int fd, const ConnectionOptions& options, const std::string& host, std::string_view endpoint);
  ~TlsHandshake();
  TlsHandshake(const TlsHandshake&) = delete;
  TlsHandshake& operator=(const TlsHandshake&) = delete;

  int fd() const noexcept;
  /// One SSL_connect step, never blocking: Want::nothing when the handshake
  /// is complete (and verified), else what the socket must become before
  /// the next step. Throws TlsError (verification, refusal, not TLS).
  Want step();
  /// The transport, once step() returned Want::nothing (once).
  std::unique_ptr<Transport> finish();
  /// Throws the TlsError of a handshake that did not end before its deadline.
  [[noreturn]] void timed_out() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Waits until `transport` can go on with `want` or `deadline` passes.
/// Returns false on timeout. Retries EINTR. A `want` of nothing returns true.
bool wait_ready(const Transport& transport, Want want, Transport::Clock::time_point deadline) noexcept;
/// The same for a bare socket (no user-space buffer to look at).
bool wait_fd_ready(int fd, Want want, Transport::Clock::time_point deadline) noexcept;

}  // namespace lockon::detail
