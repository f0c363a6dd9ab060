// lockon/errors.hpp — every exception lockon throws.
//
// One root (`lockon::Error`), one small class per failure kind, grouped so a
// caller can catch at the level it cares about:
//
//   Error
//   ├── ConfigError            bad input: URL, empty name, TTL out of range...
//   ├── IoError                the server could not be talked to (infrastructure)
//   │   ├── ConnectError       refused / unreachable / DNS failure
//   │   ├── TimeoutError       a command outlived its socket timeout
//   │   ├── ClosedError        the connection dropped mid-command
//   │   └── ProtocolError      the bytes on the wire made no sense
//   ├── ReplyError             the server answered with an error reply
//   │   ├── AuthError          NOAUTH / WRONGPASS / invalid password
//   │   └── WrongTypeError     WRONGTYPE: the lock key holds a non-string
//   ├── PoolTimeoutError       no pooled connection became free in time
//   └── LockError              misuse of a lock or a lost / unavailable lease
//       ├── LockNotOwned       the key is gone or holds another token
//       ├── LockLost           the lease expired or was taken while in use
//       ├── AcquireTimeout     the acquire deadline passed (lock busy)
//       ├── RetriesExhausted   max_retry attempts all found the lock busy
//       └── QuorumError        Redlock could not reach / win a majority
//
// Messages name the server (host:port) and the operation; they never contain
// a password or a lock token.
#pragma once

#include <stdexcept>
#include <string>

namespace lockon {

/// Root of every exception thrown by lockon.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid configuration or argument. Nothing was sent to Redis.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// Infrastructure failure: the command's outcome on the server is unknown
/// unless the subclass says otherwise (ConnectError: nothing was sent).
class IoError : public Error {
 public:
  using Error::Error;
};

/// The TCP/unix connection could not be established (refused, unreachable,
/// name resolution failed, connect timed out). Nothing was sent.
class ConnectError : public IoError {
 public:
  using IoError::IoError;
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

/// The server executed nothing and answered with an error reply
/// (`-ERR ...`, `-NOSCRIPT ...`, ...). `code()` is the first word ("ERR").
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

/// Redlock could not reach, or could not win, a majority of its nodes.
class QuorumError : public LockError {
 public:
  using LockError::LockError;
};

}  // namespace lockon
