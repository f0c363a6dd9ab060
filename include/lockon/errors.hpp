// lockon/errors.hpp — every exception lockon throws.
//
// One root (`lockon::Error`), one small class per failure kind, grouped so a
// caller can catch at the level it cares about:
//
//   Error
//   ├── ConfigError            bad input: URL, empty name, TTL out of range...
//   │   └── UnsupportedServerError  the server is older than Redis 7.0
//   ├── IoError                the server could not be talked to (infrastructure)
//   │   ├── ConnectError       refused / unreachable / no byte sent: NOT sent
//   │   │   └── TlsError       TLS handshake or certificate verification failed
//   │   ├── TimeoutError       a command outlived its socket timeout: MAYBE ran
//   │   ├── ClosedError        the connection dropped mid-command: MAYBE ran
//   │   └── ProtocolError      the bytes on the wire made no sense: MAYBE ran
//   ├── ReplyError             the server answered with an error reply
//   │   ├── AuthError          NOAUTH / WRONGPASS / invalid password
//   │   ├── WrongTypeError     WRONGTYPE: the lock key holds a non-string
//   │   ├── PermissionError    NOPERM: the ACL user may not run it / touch it
//   │   ├── ReadOnlyError      READONLY: a replica (e.g. after a failover)
//   │   └── ServerBusyError    LOADING / BUSY / MASTERDOWN / TRYAGAIN
//   ├── PoolTimeoutError       no pooled connection became free in time
//   └── LockError              misuse of a lock or a lost / unavailable lease
//       ├── LockNotOwned       the key is gone or holds another token
//       ├── LockLost           the lease expired or was taken while in use
//       ├── AcquireTimeout     the acquire deadline passed (lock busy)
//       ├── RetriesExhausted   max_retry attempts all found the lock busy
//       ├── QuorumError        Redlock could not reach / win a majority
//       └── ReplicationError   fewer replicas acknowledged a grant than required
//
// Messages name the server (host:port) and the operation; they never contain
// a password or a lock token, also when a server's error reply echoes the
// request's arguments ("ERR unknown command 'SET', with args beginning
// with: ..."): such echoes are withheld from every message and log line.
//
// A URL naming the wrong kind of deployment is a ConfigError, not a server
// error to retry: a `redis://` (or Sentinel-resolved) server that answers
// MOVED or ASK is a Redis Cluster node (use `redis-cluster://`); a server
// whose HELLO says it is a Redis Sentinel, where a data server is expected,
// needs `redis-sentinel://...#master-name`.
//
// Sentinel and Cluster: finding the master (every sentinel in turn) or the
// slot map (every known node and seed) fails with the class every node
// failed with when retrying cannot cure it — AuthError, PermissionError,
// TlsError, UnsupportedServerError, ConfigError — as it would on a single
// server; with any node unreachable, timed out or failing differently, with
// ConnectError. The message names each node tried and what it answered.
//
// Did the command reach the server? The client layer retries, once and
// transparently, every failure it detects before a request could have
// reached the server (a pooled socket found dead or out of step before
// sending, a send() that failed before writing any byte on a reused socket).
// After that:
//   - ConnectError: nothing of the command was sent (no connection, or not
//     a byte written). Safe to retry.
//   - TimeoutError, ClosedError, ProtocolError, and a plain IoError: bytes
//     were sent; the server may or may not have executed the command. The
//     client layer never retries these (a retry could run a write twice);
//     the lock layer retries acquisitions itself, with the same token.
//   - ReplyError and subclasses: the server answered; the command itself had
//     no effect (except a Lua script's error after writes the script made).
//     OOM, NOSCRIPT and other codes stay plain ReplyError: see code().
//   - A new connection's handshake (HELLO 2 [AUTH], SELECT) leaves in the
//     same write as its first commands. If the handshake fails, those
//     commands were refused too when the server requires authentication
//     (NOAUTH); they may have run on a server older than 7.0
//     (UnsupportedServerError) or, after a failed ACL login, as a default
//     user that needs no password (AuthError). A handshake that times out
//     or breaks is a TimeoutError/ClosedError like the commands behind it.
#pragma once

#include <stdexcept>
#include <string>

namespace lockon {

/// Root of every exception thrown by lockon.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid configuration or argument (a lock name over kMaxNameBytes, see
/// lockon/name.hpp), or a server lockon cannot work with: older than 7.0,
/// a Redis Sentinel or a Cluster node behind a URL that says otherwise.
/// Retrying does not help. Nothing was sent to Redis, or nothing it ran
/// (for a server of the wrong kind: its first requests were refused; a
/// caller's own pipeline may have run its commands that were not; for
/// UnsupportedServerError, see the handshake note above).
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// The server is older than lockon's minimum (Redis 7.0: `SET ... NX GET`,
/// `PEXPIRE ... GT`), found by the HELLO handshake when connecting (a server
/// that does not know HELLO is older than 6.0). The message names the
/// endpoint and the version it runs: "lockon needs Redis >= 7.0;
/// 10.0.0.5:6379 runs 6.2.14". Thrown on every use of such a server.
class UnsupportedServerError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

/// Infrastructure failure: the command's outcome on the server is unknown
/// unless the subclass says otherwise (ConnectError: nothing was sent).
class IoError : public Error {
 public:
  using Error::Error;
};

/// The TCP/unix connection could not be established (refused, unreachable,
/// name resolution failed, connect timed out), or a fresh socket could not
/// send a single byte. Nothing of the command was sent.
class ConnectError : public IoError {
 public:
  using IoError::IoError;
};

/// The TLS handshake failed: the server's certificate did not verify
/// (unknown CA, host name mismatch, expired), the server demanded a client
/// certificate, the peer does not speak TLS (a plaintext port behind
/// `rediss://`), or the TLS settings are unusable (unreadable CA file, key
/// not matching the certificate). The message says which. Nothing was sent.
class TlsError : public ConnectError {
 public:
  using ConnectError::ConnectError;
};

/// A command's reply did not arrive within the socket timeout; whether the
/// server executed it is unknown. (A connect timeout is a ConnectError.)
class TimeoutError : public IoError {
 public:
  using IoError::IoError;
};

/// The peer closed the connection (or it broke) while a command was pending.
class ClosedError : public IoError {
 public:
  using IoError::IoError;
};

/// Malformed protocol data or an unexpected reply shape.
class ProtocolError : public IoError {
 public:
  using IoError::IoError;
};

/// The server answered with an error reply (`-ERR ...`, `-OOM ...`,
/// `-NOSCRIPT ...`); the command had no effect. `code()` is the first word
/// ("ERR", "OOM"); the subclasses below name the codes a caller may want to
/// handle apart.
class ReplyError : public Error {
 public:
  ReplyError(const std::string& message, std::string code)
      : Error(message), code_(std::move(code)) {}
  /// The error code the server sent, e.g. "ERR", "WRONGTYPE", "NOAUTH".
  const std::string& code() const noexcept { return code_; }

 private:
  std::string code_;
};

/// Authentication failed or is required (NOAUTH, WRONGPASS, invalid password).
class AuthError : public ReplyError {
 public:
  using ReplyError::ReplyError;
};

/// The key exists but holds a value of another type (e.g. a hash where a lock
/// string was expected). lockon never overwrites such a key.
class WrongTypeError : public ReplyError {
 public:
  using ReplyError::ReplyError;
};

/// NOPERM: the ACL user lacks the command, key or channel permission.
class PermissionError : public ReplyError {
 public:
  using ReplyError::ReplyError;
};

/// READONLY: the server is a replica (typically after a failover the client
/// still points at the old master). Writes must go to the new master.
class ReadOnlyError : public ReplyError {
 public:
  using ReplyError::ReplyError;
};

/// The server refused for now: LOADING (loading its dataset), BUSY (a script
/// or function is running), MASTERDOWN (a replica lost its master),
/// TRYAGAIN (a cluster slot is migrating). Retrying later may succeed.
class ServerBusyError : public ReplyError {
 public:
  using ReplyError::ReplyError;
};

/// Every pooled connection stayed busy for the pool's wait timeout.
class PoolTimeoutError : public Error {
 public:
  using Error::Error;
};

/// Lock misuse (released while not held, acquired twice...) and the base of
/// lease-related failures. `name()` is the lock's key.
class LockError : public Error {
 public:
  LockError(const std::string& message, std::string name = {})
      : Error(message), name_(std::move(name)) {}
  /// The lock key this error is about (may be empty for generic misuse).
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
};

/// The lock key no longer holds our token: it expired, was deleted, or was
/// taken by another owner.
class LockNotOwned : public LockError {
 public:
  using LockError::LockError;
};

/// The lease was lost while the protected work ran (reported after it ran).
class LockLost : public LockError {
 public:
  using LockError::LockError;
};

/// The acquire deadline passed while the lock was held by someone else.
class AcquireTimeout : public LockError {
 public:
  using LockError::LockError;
};

/// The configured number of attempts all found the lock held.
class RetriesExhausted : public LockError {
 public:
  using LockError::LockError;
};

/// A lock_on call found its key held by the calling thread itself (an
/// enclosing lock_on call of the same locker) and is not reentrant: waiting
/// could only end at its timeout. Thrown at once, nothing sent; set
/// LockOnOptions::reentrant to run such a nested call under the enclosing
/// lock.
class HeldByThisThread : public LockError {
 public:
  using LockError::LockError;
};

/// Redlock could not reach, or could not win, a majority of its nodes.
class QuorumError : public LockError {
 public:
  using LockError::LockError;
};

/// LockOptions::replica_acks: fewer replicas than required acknowledged an
/// acquisition (or hand-over) within the timeout (`WAIT`). The lock was
/// released (or handed to the background clean-up if the release failed):
/// it is not held. The grant may still have reached some replicas.
class ReplicationError : public LockError {
 public:
  ReplicationError(const std::string& message, std::string name, int acknowledged, int required)
      : LockError(message, std::move(name)), acknowledged_(acknowledged), required_(required) {}
  int acknowledged() const noexcept { return acknowledged_; }
  int required() const noexcept { return required_; }

 private:
  int acknowledged_;
  int required_;
};

}  // namespace lockon
