// support/raw_connection.hpp — a blocking hiredis connection that bypasses
// lockon, so tests can inspect and poke server state independently of the
// code under test. No GoogleTest here: benchmarks reuse this.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct redisContext;

namespace lockon::test {

/// One reply of the raw connection. Error replies are values (type error,
/// text in `str`), not exceptions: tests assert on them.
struct RawReply {
  enum class Type { string, array, integer, nil, status, error };
  Type type = Type::nil;
  long long integer = 0;
  std::string str;  // string, status and error text
  std::vector<RawReply> elements;

  bool is_nil() const { return type == Type::nil; }
  bool is_error() const { return type == Type::error; }
  /// True for a status or bulk string equal to `text` (e.g. "OK", "PONG").
  bool is(const std::string& text) const {
    return (type == Type::status || type == Type::string) && str == text;
  }
  /// "PONG", "(integer) 3", "(error) NOAUTH ...", "[a, b]"... for messages.
  std::string to_string() const;
};

/// Thrown by RawConnection when the server cannot be talked to.
class RawIoError : public std::runtime_error {
 public:
  RawIoError(const std::string& message, bool timed_out)
      : std::runtime_error(message), timed_out_(timed_out) {}
  /// The connect or the reply outlived its timeout (e.g. a paused server).
  bool timed_out() const noexcept { return timed_out_; }

 private:
  bool timed_out_;
};

struct RawConnectOptions {
  /// ACL user for AUTH; empty with a password: `AUTH password`.
  std::string user{};
  /// Empty: no AUTH is sent.
  std::string password{};
  std::chrono::milliseconds connect_timeout{1000};
  /// Bound on each command's reply; a paused server makes commands throw
  /// RawIoError{timed_out()==true} after this.
  std::chrono::milliseconds command_timeout{5000};
};

/// A blocking hiredis connection that does not go through lockon, to inspect
/// or poke server state. After an I/O error it is broken for good: open a new
/// one. One thread at a time.
class RawConnection {
 public:
  /// Connects (and AUTHs if a password is given). Throws RawIoError if the
  /// server cannot be reached, std::runtime_error if AUTH is refused.
  RawConnection(const std::string& host, int port, const RawConnectOptions& options = {});
  RawConnection(RawConnection&&) noexcept;
  RawConnection& operator=(RawConnection&&) noexcept;
  ~RawConnection();

  /// Sends one command, waits for its reply. Throws RawIoError on I/O error.
  RawReply command(const std::vector<std::string>& args);
  /// Waits for one more reply without sending anything: a message pushed
  /// after SUBSCRIBE. Throws RawIoError on I/O error or timeout (hiredis
  /// then leaves the connection unusable).
  RawReply next_reply();
  /// Changes the per-command timeout of this connection.
  void set_command_timeout(std::chrono::milliseconds timeout);

 private:
  struct Free {
    void operator()(redisContext* context) const noexcept;
  };
  std::unique_ptr<redisContext, Free> context_;
  std::string endpoint_;
};

/// The `CLIENT LIST TYPE pubsub` lines of the server behind `connection`.
std::vector<std::string> pubsub_clients(RawConnection& connection);

/// The number after " sub=" in a CLIENT LIST line (channels subscribed), or -1.
long long subscriptions(const std::string& client_line);

/// "calls=N" of `command` (lower case, e.g. "evalsha") in `info`, the text
/// of INFO commandstats: how often the server ran it (0 if never).
inline long long commandstats_calls_in(const std::string& info, const std::string& command) {
  const std::string field = "cmdstat_" + command + ":calls=";
  const auto at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

/// commandstats_calls_in of the server behind `raw`.
inline long long commandstats_calls(RawConnection& raw, const std::string& command) {
  return commandstats_calls_in(raw.command({"INFO", "commandstats"}).str, command);
}

/// Scripts the server ran so far (EVALSHA and EVAL calls).
inline long long scripts_run(RawConnection& raw) {
  return commandstats_calls(raw, "evalsha") + commandstats_calls(raw, "eval");
}

}  // namespace lockon::test
