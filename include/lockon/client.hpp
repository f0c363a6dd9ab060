// lockon/client.hpp — a thread-safe handle to one Redis server.
//
// A Client owns a bounded pool of connections, on one server a shared
// connection on which the lock calls of all threads are pipelined
// (ConnectionOptions::auto_pipeline, on by default), the script cache and,
// once a lock waits, the process's subscriber connection for that server. It
// is a cheap, copyable handle: copies share all of these. Locks keep the
// client they were made from alive.
//
// hiredis stays behind this header; replies come back as `lockon::Reply`.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/options.hpp"

namespace lockon {

namespace detail {
class ClientImpl;
}

/// A Redis reply as a value. Error replies never reach the caller as a Reply:
/// they are thrown as ReplyError (or a subclass).
class Reply {
 public:
  enum class Type { nil, integer, string, status, array };

  Reply() = default;
  static Reply nil() { return Reply(); }
  static Reply integer(long long v);
  static Reply string(std::string s);
  static Reply status(std::string s);
  static Reply array(std::vector<Reply> elements);

  Type type() const noexcept { return type_; }
  bool is_nil() const noexcept { return type_ == Type::nil; }
  /// Precondition: type() == integer (else throws ProtocolError).
  long long as_integer() const;
  /// Precondition: type() is string or status (else throws ProtocolError).
  const std::string& as_string() const;
  /// Precondition: type() == array (else throws ProtocolError).
  const std::vector<Reply>& elements() const;

 private:
  Type type_ = Type::nil;
  long long integer_ = 0;
  std::string string_;
  std::vector<Reply> elements_;
};

/// Connection to one Redis server through a bounded pool.
///
/// Thread safety: every member may be called from any number of threads.
class Client {
 public:
  /// Does not connect; the first command (or `ping()`) does. Throws
  /// ConfigError if the options are invalid (port range, pool size 0, ...).
  ///
  /// Connecting does one handshake round trip: `HELLO 2` (with `AUTH user
  /// password` when credentials are set), then `SELECT db` if db != 0. A
  /// server older than Redis 7.0 fails it with UnsupportedServerError.
  explicit Client(ConnectionOptions options, PoolOptions pool = {});
  /// Shorthand for Client(ConnectionOptions::from_url(url), pool).
  explicit Client(std::string_view url, PoolOptions pool = {});

  /// Sends one command and waits for its reply. Blocks up to the pool wait
  /// plus the socket timeout. Throws IoError subclasses, ReplyError
  /// subclasses, PoolTimeoutError. A connection broken by an IoError is
  /// reconnected on its next use. A pooled connection the server closed
  /// while it sat idle (restart, client `timeout`) is replaced before the
  /// command is sent, invisibly; see errors.hpp for which IoError means the
  /// command may have run. Commands that would change the session of a
  /// connection lockon shares (SELECT, the SUBSCRIBE family, MONITOR,
  /// HELLO, AUTH, RESET, QUIT, READONLY, READWRITE, CLIENT REPLY/TRACKING,
  /// and MULTI/WATCH/EXEC alone) throw ConfigError before anything is sent:
  /// set the database and credentials in the URL, send a transaction whole
  /// with pipeline().
  Reply command(std::initializer_list<std::string_view> args) const;
  Reply command(const std::vector<std::string>& args) const;

  /// Sends several commands in one round trip; replies in order. An error
  /// reply for any command throws after all replies were read. Whatever
  /// throws, the connection never goes back to the pool owing replies. The
  /// commands command() refuses are refused here too, except a transaction
  /// the pipeline closes (MULTI ... EXEC/DISCARD, WATCH ... EXEC/UNWATCH).
  ///
  /// Redis Cluster: the pipeline's keys must share one slot (ConfigError
  /// otherwise). While that slot migrates, the node may run some commands
  /// and refuse others (ASK, MOVED, TRYAGAIN, CLUSTERDOWN: a refused
  /// command did not run). Only the refused ones are sent again — to the
  /// node the redirection names, after a back-off for TRYAGAIN and
  /// CLUSTERDOWN, bounded like command() — and every reply stays in its
  /// position; a command that ran never runs twice. So resent commands run
  /// after the others, possibly on another node. A transaction (MULTI ...
  /// EXEC) with a refused command did not run and is resent whole; a WAIT
  /// after a refused command is sent again after it. A pipeline holding
  /// WATCH is never resent in part. A WAIT (WAITAOF) that ran on several
  /// nodes answers the fewest acknowledgments any of them reported: each
  /// covers only the writes sent to its node.
  ///
  /// Once some command ran, the error never invites sending the pipeline
  /// again whole (that would run the others twice):
  ///   - refused commands remain (the bound ran out, a transaction over keys
  ///     the migration split, a WATCH pipeline), or their resend failed
  ///     before anything was sent (the node refused connections until the
  ///     bound, no master served the slot, no pooled connection): ReplyError
  ///     with the first refused command's code (ASK, MOVED, TRYAGAIN or
  ///     CLUSTERDOWN), never ServerBusyError, ConnectError or
  ///     PoolTimeoutError;
  ///   - the resend was (or may have been) sent and failed (TimeoutError,
  ///     ClosedError, ProtocolError, IoError): the same class, its message
  ///     saying that other commands ran and the resent ones may have run.
  /// Both messages name the refused command and end "do not send the
  /// pipeline again whole". Nothing ran and the bound ran out:
  /// ServerBusyError, as for command().
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string>>& commands) const;

  /// PING the server; connects if needed. Throws like command().
  void ping() const;

  /// The servers that hold this client's keys now, each as options a Client
  /// can be made from (this client's credentials, TLS and timeouts): the
  /// server; a Sentinel deployment's current master; every master of a
  /// Cluster, from a fresh read of its slot map. For tools that must visit
  /// every key (SCAN runs on one server). Throws what connecting or
  /// resolving throws; on a Cluster ServerBusyError if a slot has no master.
  std::vector<ConnectionOptions> masters() const;

  const ConnectionOptions& options() const noexcept;
  /// "host:port" of the server (no credentials).
  std::string endpoint() const;

  /// For lockon's own layers (lock primitives, subscriber, watchdog).
  const std::shared_ptr<detail::ClientImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::ClientImpl> impl_;
};

}  // namespace lockon
