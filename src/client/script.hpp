// Lua scripts run by SHA with a transparent fallback to EVAL.
//
// EVALSHA saves sending the body on every call; a server that does not know
// the script (first use, restart, SCRIPT FLUSH) answers NOSCRIPT and we send
// EVAL, which also caches it for next time.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/connection.hpp"
#include "client/hiredis_handles.hpp"

namespace lockon::detail {

class Script {
 public:
  /// Computes the SHA1 once (OpenSSL EVP).
  explicit Script(std::string body);
  const std::string& body() const noexcept { return body_; }
  const std::string& sha() const noexcept { return sha_; }

 private:
  std::string body_;
  std::string sha_;
};

/// Runs `script` on `connection` and returns its reply (error replies other
/// than NOSCRIPT are returned, not thrown). Throws IoError.
/// Precondition: no other reply is pending on the connection.
ReplyPtr eval(Connection& connection, const Script& script, std::span<const std::string_view> keys,
              std::span<const std::string_view> args, std::string_view operation);

/// Pipelining: queue an EVALSHA without I/O...
void append_evalsha(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                    std::span<const std::string_view> args);
/// ...and, once its reply was read, redo it with EVAL if the reply was
/// NOSCRIPT. Precondition: no other reply is pending on the connection.
/// Its read waits for the socket timeout: a caller with a deadline queues
/// the EVAL itself (append_eval) and reads it by that deadline.
ReplyPtr resolve_noscript(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                          std::span<const std::string_view> args, ReplyPtr reply, std::string_view operation);

/// Queues an EVAL of `script` (its body) without I/O.
void append_eval(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> args);

bool is_noscript(const redisReply& reply) noexcept;

/// One call of a pipelined batch: the script's keys and arguments.
struct ScriptCall {
  std::span<const std::string_view> keys;
  std::span<const std::string_view> args;
};

/// Runs `script` once per call in one pipeline on `connection`: one write,
/// the replies read in order, NOSCRIPT replies redone with EVAL once every
/// pipelined reply is read. Returns the replies in the calls' order (error
/// replies returned, not thrown). Throws IoError (which calls ran is then
/// unknown). Precondition: no other reply is pending on the connection.
std::vector<ReplyPtr> eval_pipelined(Connection& connection, const Script& script, std::span<const ScriptCall> calls,
                                     std::string_view operation);

}  // namespace lockon::detail
