// One blocking connection with lazy (re)connect: a Transport (TCP, Unix or
// TLS; see transport.hpp) carrying RESP that we format ourselves and parse
// with hiredis's reader. The socket is non-blocking; every wait is a poll()
// bounded by a deadline (the socket timeout, or the caller's), so changing
// the timeout costs no syscall.
//
// A Connection is used by one thread at a time (the pool guarantees it). Any
// I/O failure marks it broken: the reply stream can no longer be trusted, so
// the next use drops the socket and reconnects.
//
// Handshake: a new socket's first write carries `HELLO 2` (with `AUTH user
// password` when credentials are set), `SELECT db` (if db != 0) and the
// caller's first requests: one round trip, bounded like any read (a
// fan-out's shared deadline bounds a reconnect to a stalled node too). The
// first read checks HELLO's reply (server >= 7.0, credentials) before the
// caller's replies: AuthError / UnsupportedServerError then; the requests
// behind it were answered with errors (NOAUTH) or, on a server lockon does
// not support or whose default user needs no password, may have run.
//
// Request/reply bookkeeping: the connection counts the requests appended and
// the replies read. One that still owes replies (a caller threw between
// sending and reading) is out of step: the pool marks it broken rather than
// hand the next caller an earlier command's reply.
//
// Stale sockets: a pooled connection may have been closed by the server
// (restart, `timeout`, kill) while it sat idle. Before a request is sent on a
// connection not used for more than kIdleCheckAfter (measured between two
// ensure_connected() calls, on the coarse clock), a non-blocking poll()
// checks that nothing is readable (an idle request/reply socket has nothing
// to say; EOF or stray bytes mean it is dead or out of step) and reconnects
// first. A send() that fails before writing any byte on a reused socket is
// retried once on a fresh one. Both happen before the request could have
// reached the server, so they are invisible to the caller; a failure after
// bytes were written is never retried here (see errors.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include "client/asking.hpp"
#include "client/error_map.hpp"
#include "client/hiredis_handles.hpp"
#include "client/transport.hpp"
#include "client/server_version.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class Connection {
 public:
  using Clock = std::chrono::steady_clock;
  /// A connection used more recently than this is not polled before the
  /// next request: the uncontended lock cycle stays free of extra syscalls.
  static constexpr auto kIdleCheckAfter = std::chrono::milliseconds(2);

  /// `role`: what the server must be (a Sentinel only where one is meant:
  /// check_hello_reply).
  explicit Connection(ConnectionOptions options, ServerRole role = ServerRole::data);

  /// Connects (or reconnects a broken, stale or out-of-step connection) and
  /// queues the handshake in front of the requests to come (the next flush
  /// sends it, the next read checks it). Throws ConnectError (nothing was
  /// sent). Does nothing while replies are owed: the caller is in the
  /// middle of an exchange.
  void ensure_connected();
  /// As ensure_connected(), but a (re)connection waits at most until
  /// `deadline` when that comes before the connect timeout: false if it
  /// passed first (nothing was sent; the connection stays unconnected).
  /// A caller's deadline bounds the TCP connect too: a full accept queue
  /// (a stalled server flooded with reconnections) holds a SYN for a
  /// second or more.
  bool ensure_connected_by(Clock::time_point deadline);

  /// Sends a pending handshake and waits for and checks its replies (reads
  /// do this by themselves; for users of raw()). Blocks up to the socket
  /// timeout. Throws ConnectError (I/O failure or timeout: nothing else was
  /// sent), AuthError, UnsupportedServerError, ReplyError (bad db index);
  /// the connection is then broken.
  void complete_handshake();

  /// Sends one command and waits for its reply. Error replies are returned,
  /// not thrown (callers decide: NOSCRIPT is handled by scripts). Throws
  /// IoError subclasses; the connection is then broken.
  ReplyPtr command(std::span<const std::string_view> args, std::string_view operation);

  /// Queues a command in the output buffer (no I/O). Every appended command
  /// owes one reply until read.
  void append(std::span<const std::string_view> args);
  /// Writes the output buffer completely. Throws IoError (ConnectError if
  /// not a byte could be written, even on a fresh socket).
  void flush(std::string_view operation);
  /// Reads the next reply (flushing first if needed). Throws IoError.
  ReplyPtr read_reply(std::string_view operation);
  /// As read_reply, but waits for the reply only until `deadline`
  /// (TimeoutError after it; the connection is then broken).
  ReplyPtr read_reply_until(Clock::time_point deadline, std::string_view operation);
  /// The next reply, waiting until the socket timeout or `deadline`,
  /// whichever comes first (TimeoutError after it). When the socket timeout
  /// comes first (no deadline, or a far one) this is read_reply: one
  /// blocking recv(), where waiting for a deadline costs a recv that finds
  /// nothing, a poll and a recv. Returns whether `deadline` was the bound
  /// through `*deadline_first` (a TimeoutError then means it passed).
  ReplyPtr read_reply_by(Clock::time_point deadline, std::string_view operation, bool* deadline_first = nullptr);
  /// The next reply if it is in by `deadline`; else nullptr, and the
  /// connection stays usable: the reply is still owed and a later read
  /// returns it (the shared connection of auto-pipelining, where one
  /// caller's deadline must not break the connection under the others).
  /// A handshake, abandoned or ASKING reply still pending is read first,
  /// as softly (a handshake error reply still throws and breaks it).
  ReplyPtr read_reply_before(Clock::time_point deadline, std::string_view operation);
  /// Now plus the socket timeout (time_point::max() without one): when a
  /// read_reply() started now would give up.
  Clock::time_point timeout_deadline() const noexcept;

  /// Cluster ASK redirection (client/asking.hpp): while on, append() puts
  /// ASKING before every command outside MULTI...EXEC, and each read drops
  /// that ASKING's reply before returning the command's. Set by routed_call
  /// around one exchange; turning it off forgets the bookkeeping.
  void set_asking(bool on) noexcept;

  /// Whether commands were appended whose replies were not read yet.
  bool owes_replies() const noexcept { return queued_ + in_flight_ != 0; }

  /// Gives up waiting for the replies of the requests sent (a fan-out that
  /// was decided without this node): they will be read and dropped before
  /// the next reply, so the connection stays usable (and warm) instead of
  /// being reconnected. Returns false — and marks it broken — if too many
  /// are already abandoned (a node frozen for long). Precondition: nothing
  /// queued unsent.
  bool abandon_replies() noexcept;
  /// Replies still to be dropped (see abandon_replies).
  std::uint64_t abandoned_replies() const noexcept { return discard_; }
  /// Drops abandoned replies that already arrived, without blocking.
  /// Returns false (connection broken) on EOF or an error.
  bool drop_arrived_abandoned() noexcept;
  /// At most this many abandoned replies are kept owed on a connection.
  static constexpr std::uint64_t kMaxAbandoned = 64;

  /// Changes the read/write timeout for the following calls (0 = none). The
  /// configured socket timeout is restored by restore_timeout(). No syscall.
  void set_timeout(std::chrono::milliseconds timeout);
  void restore_timeout();
  /// set_timeout() for a scope (null: nothing): the configured timeout
  /// returns at its end.
  class ScopedTimeout {
   public:
    ScopedTimeout(Connection* connection, std::chrono::milliseconds timeout) : connection_(connection) {
      if (connection_ != nullptr) connection_->set_timeout(timeout);
    }
    ~ScopedTimeout() {
      if (connection_ != nullptr) connection_->restore_timeout();
    }
    ScopedTimeout(const ScopedTimeout&) = delete;
    ScopedTimeout& operator=(const ScopedTimeout&) = delete;

   private:
    Connection* connection_;
  };

  void mark_broken() noexcept { broken_ = true; }
  bool connected() const noexcept { return transport_ != nullptr && !broken_; }
  /// The socket (-1 when not connected), for poll() over several connections.
  int fd() const noexcept { return transport_ ? transport_->fd() : -1; }
  /// Whether input is already buffered in user space (unparsed bytes in the
  /// reader, or TLS records): poll() on fd() would not report it.
  bool has_buffered_input() const noexcept;

  // For the subscriber's push-driven use (after complete_handshake()):
  /// Reads, without blocking, every byte the socket has now into the
  /// reader. Returns false (connection broken) on EOF or an error.
  bool pump_input() noexcept;
  /// Takes the next complete reply already read (null if none). Returns
  /// false (connection broken) if the bytes are not valid RESP.
  bool take_buffered_reply(ReplyPtr& reply) noexcept;

  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  // Writes as much of out_ as the timeout allows; returns the bytes sent
  // and, if not all, why in *failure.
  std::size_t send_buffer(IoStatus* failure);
  // Marks the connection broken and throws the mapped IoError.
  [[noreturn]] void fail(IoFailure failure, const IoStatus& status, Phase phase, std::string_view operation);
  // Opens a new socket and sends the handshake; queued requests are kept
  // only if `keep_queued` (a resend of requests that never left).
  void open(bool keep_queued, Clock::time_point connect_deadline = Clock::time_point::max());
  bool finish_handshake(const Clock::time_point* deadline, std::string_view caller, bool soft = false);
  // Reads the next reply, waiting at most until *deadline if given (else the
  // socket timeout); I/O failures are mapped for `phase`.
  // `soft`: when `deadline` passes before a whole reply is in, returns
  // nullptr and leaves the connection as it is (the reply still owed, any
  // part of it kept by the reader) instead of failing with TimeoutError.
  ReplyPtr next_reply(const Clock::time_point* deadline, Phase phase, std::string_view operation, bool soft = false);
  // Whether an idle connection must be replaced before use; notes this use.
  bool stale() noexcept;
  void got_reply() noexcept;
  // Reads and drops the abandoned replies (bounded like a read).
  bool skip_abandoned(const Clock::time_point* deadline, std::string_view operation, bool soft = false);
  // In ASK mode: reads and drops the ASKING reply in front of the next
  // command's, if it has one.
  bool skip_asking(const Clock::time_point* deadline, std::string_view operation, bool soft = false);

  ConnectionOptions options_;
  std::string endpoint_;
  std::unique_ptr<Transport> transport_;
  ReaderPtr reader_;
  bool broken_ = false;
  std::string out_;  // requests formatted as RESP, not yet sent (see flush)
  std::chrono::milliseconds timeout_{0};  // bound of blocking waits (0: none)
  std::uint64_t queued_ = 0;     // requests in out_
  std::uint64_t in_flight_ = 0;  // requests sent whose reply was not read
  std::uint64_t discard_ = 0;    // abandoned replies to drop before the next one
  bool used_ = false;            // a request was sent on this socket
  ServerRole role_ = ServerRole::data;
  int handshake_replies_ = 0;    // handshake replies not read yet
  bool asking_ = false;          // ASK mode (set_asking)
  AskingPrefixer prefixer_;      // which commands get ASKING, in ASK mode
  std::vector<bool> asked_;      // per command appended in ASK mode: ASKING in front?
  std::size_t asked_read_ = 0;   // commands of asked_ whose reply was read
  std::int64_t last_use_ns_ = 0;  // CLOCK_MONOTONIC_COARSE at the last ensure_connected()
};

/// Formats one command as RESP and appends it to `out`.
void append_resp(std::string& out, std::span<const std::string_view> args);

}  // namespace lockon::detail
