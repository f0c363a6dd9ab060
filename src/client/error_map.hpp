// The one place where transport failures and error replies become lockon
// exceptions. Every client-layer path (commands, pipelines, scripts, the
// handshake, fan-out) maps through here, so a code means the same exception
// wherever it shows up.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

#include "client/hiredis_handles.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

/// What the connection was doing when it failed; it changes the mapping:
/// during `connect` (socket and handshake) every failure means "nothing of
/// the caller's command was sent" (ConnectError).
enum class Phase { connect, command };

/// What a transport-level failure was, for throw_io_error.
enum class IoFailure {
  io,        ///< the socket failed (errno in saved_errno, or `cause` for TLS)
  eof,       ///< the peer closed the stream
  protocol,  ///< the bytes made no sense (RESP reader error)
  timeout,   ///< the deadline passed while waiting
};

/// Throws the IoError subclass for a transport failure: during `connect`
/// always ConnectError (nothing of the caller's command reached the
/// server); else TimeoutError / ClosedError / ProtocolError / ClosedError.
/// `cause` describes it when errno cannot (empty: strerror(saved_errno)).
[[noreturn]] void throw_io_error(IoFailure failure, int saved_errno, std::string_view cause, Phase phase,
                                 std::string_view endpoint, std::string_view operation);

/// The longest part of a server's error text that goes into a message.
inline constexpr std::size_t kMaxServerTextBytes = 512;

/// What stands in a message for the arguments a server echoed.
inline constexpr std::string_view kArgumentsWithheld = "(arguments withheld)";

/// How much longer than the server's text its scrubbed form may be: the
/// placeholder stands at most twice (an echo to the end of the text, or a
/// quoted echo then one more), each with a space or quote of its own. An
/// echo of one character becomes the placeholder, so the message of a short
/// reply may exceed the reply by this much, never by more.
inline constexpr std::size_t kMaxScrubGrowth = 2 * (kArgumentsWithheld.size() + 1);

/// Error reply `text` made fit for an exception message or a log: a server
/// may echo a request's arguments — a lock token, a password — in its
/// error ("ERR unknown command 'SET', with args beginning with: 'K' '<token>'",
/// "ERR Error in ACL SETUSER modifier '>secret'"). This withholds every
/// echoed argument ("... with args beginning with: (arguments withheld)"),
/// replaces control bytes with '?' (one line in a log) and cuts the text
/// to kMaxServerTextBytes (plus "..."). Its size is at most
/// max(text.size() + kMaxScrubGrowth, kMaxServerTextBytes + 3). Every path that turns an error reply into an
/// exception or a log line goes through it (throw_reply_error does).
std::string scrub_server_error(std::string_view text);

/// Whether error reply `text` says the key lives on another node of a Redis
/// Cluster (MOVED, ASK): only a cluster node sends it.
bool is_cluster_redirect(std::string_view text) noexcept;

/// For a client that does not follow cluster redirections (a `redis://` or
/// `redis-sentinel://` URL): throws ConfigError "... this server is a Redis
/// Cluster node: use a redis-cluster:// URL" if `reply` is a MOVED or ASK
/// (is_cluster_redirect), else returns. A MOVED is no busy server to retry
/// later: the URL names the wrong kind of deployment. Nothing ran.
void check_not_cluster_redirect(const redisReply& reply, std::string_view endpoint, std::string_view operation);

/// The exception class an error reply maps to.
enum class ReplyKind { generic, auth, wrong_type, permission, read_only, busy };

/// Classifies error reply `text` (e.g. "NOPERM this user has no ..."):
///   WRONGTYPE → wrong_type;  NOAUTH, WRONGPASS, ERR invalid password... → auth;
///   NOPERM → permission;  READONLY → read_only;
///   LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, MOVED, ASK → busy;  anything else (ERR, OOM,
///   NOSCRIPT, EXECABORT...) → generic.
ReplyKind classify_reply_error(std::string_view text) noexcept;

/// Throws the ReplyError subclass for error reply `text` (see
/// classify_reply_error); code() is its first word; the message carries
/// the text scrubbed (scrub_server_error).
[[noreturn]] void throw_reply_error(std::string_view text, std::string_view endpoint, std::string_view operation);

/// As above for a hiredis reply. Precondition: reply.type == REDIS_REPLY_ERROR.
[[noreturn]] void throw_reply_error(const redisReply& reply, std::string_view endpoint,
                                    std::string_view operation);

/// Convenience: throws if `reply` is an error reply, otherwise returns.
inline void check_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  if (is_error_reply(reply)) throw_reply_error(reply, endpoint, operation);
}

/// Sums up a lookup that failed on every node it tried (the Cluster map
/// read over the known masters and the seeds, the Sentinel resolution over
/// the sentinels) into one exception, so that a deployment in between does
/// not change what a failure is: a wrong password is an AuthError on a
/// single server, and must not become a ConnectError ("unavailable, try
/// again") because a cluster or sentinels stand in front of it.
///
/// throw_summary() throws the class every node failed with when it is one
/// that retrying cannot cure: AuthError or PermissionError (with the first
/// failure's code()), TlsError, UnsupportedServerError or another
/// ConfigError. Otherwise — a node refused the connection or timed out, the
/// nodes failed differently, a node answered without an error but with no
/// use (an unknown master, no slots), or nothing was tried — ConnectError.
/// Either way nothing of the caller's command was sent.
class NodeFailures {
 public:
  /// Records the error one node failed with.
  void add(const Error& failure);
  /// Records a node that failed without an error of its own (it answered,
  /// but not with what was asked; or the time ran out before it was tried).
  void add_unclassified() noexcept;
  /// Throws the summary, with `message`: it names the nodes tried and what
  /// each answered (and, like every message, never a password).
  [[noreturn]] void throw_summary(const std::string& message) const;

 private:
  enum class Kind { none, unclassified, auth, permission, tls, unsupported_server, config };
  void note(Kind kind, const std::string& code);

  Kind kind_ = Kind::none;
  std::string code_;  // of the first AuthError / PermissionError
};

/// Whether `failure` leaves the request's outcome unknown: an I/O failure
/// after it may have been written (IoError), but not ConnectError (nothing
/// was sent). Anything else (a reply, a usage error) is a known outcome.
inline bool outcome_unknown(const std::exception_ptr& failure) noexcept {
  try {
    std::rethrow_exception(failure);
  } catch (const ConnectError&) {
    return false;
  } catch (const IoError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace lockon::detail
