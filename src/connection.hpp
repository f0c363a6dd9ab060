// One blocking hiredis connection with lazy (re)connect.
//
// A Connection is used by one thread at a time (the pool guarantees it). Any
// I/O failure marks it broken: the reply stream can no longer be trusted, so
// the next use drops the socket and reconnects (AUTH and SELECT included).
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>

#include "hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class Connection {
 public:
  explicit Connection(ConnectionOptions options);

  /// Connects (or reconnects a broken connection). Throws ConnectError,
  /// AuthError, ReplyError (bad db index).
  void ensure_connected();

  /// Sends one command and waits for its reply. Error replies are returned,
  /// not thrown (callers decide: NOSCRIPT is handled by scripts). Throws
  /// IoError subclasses; the connection is then broken.
  ReplyPtr command(std::span<const std::string_view> args, std::string_view operation);

  /// Queues a command in the output buffer (no I/O).
  void append(std::span<const std::string_view> args);
  /// Writes the output buffer completely. Throws IoError.
  void flush(std::string_view operation);
  /// Reads the next reply (flushing first if needed). Throws IoError.
  ReplyPtr read_reply(std::string_view operation);
  /// As read_reply, but waits for the reply only until `deadline`
  /// (TimeoutError after it; the connection is then broken).
  ReplyPtr read_reply_until(std::chrono::steady_clock::time_point deadline, std::string_view operation);

  /// Changes the read/write timeout for the following calls (0 = none). The
  /// configured socket timeout is restored by restore_timeout().
  void set_timeout(std::chrono::milliseconds timeout);
  void restore_timeout();

  void mark_broken() noexcept { broken_ = true; }
  bool connected() const noexcept { return context_ != nullptr && !broken_; }
  int fd() const noexcept;
  /// The raw context, for the subscriber's non-request/reply use.
  redisContext* raw() const noexcept { return context_.get(); }
  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  [[noreturn]] void fail(std::string_view operation);
  void handshake();

  ConnectionOptions options_;
  std::string endpoint_;
  ContextPtr context_;
  bool broken_ = false;
  std::string out_;  // requests formatted as RESP, not yet sent (see flush)
  std::chrono::milliseconds current_timeout_{-1};
};

}  // namespace lockon::detail
