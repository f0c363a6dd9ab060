// tools/report.hpp — what `lockon` writes to stderr, and how failures map to
// exit statuses.
//
// Every error is one line, "lockon: <what>: <cause>", where the cause names
// the server (lockon's exceptions already say "operation on host:port: ...").
// Secrets never reach stderr: each message goes through a Redactor that
// knows the passwords of the URLs in use and the lock token, and replaces
// them (the token by its first characters) — a second line of defence behind
// lockon's own rule that messages never contain either.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::cli {

/// Removes known secrets from text.
class Redactor {
 public:
  /// Hides `password` wherever it appears (no-op for an empty one).
  void add_password(std::string password);
  /// Shows at most token_prefix(token) of `token` wherever it appears.
  void add_token(std::string token);
  /// Hides the credentials of every "scheme://user:password@" in `text` (a
  /// whole argument or environment value: a password may hold spaces,
  /// '@', ':'), parsable or not, wherever they appear later.
  void add_url_credentials(std::string_view text);
  std::string apply(std::string text) const;

 private:
  std::vector<std::pair<std::string, std::string>> replacements_;
};

/// The secrets of the command line and of $LOCKON_REDIS_URL, filled by
/// main() before anything is parsed: every message goes through it, also
/// those about arguments that never parsed (review, session 21: CLI11
/// echoed a misplaced --url whole).
Redactor& argument_secrets();

/// True when `text` starts like a Redis URL (redis://, rediss://,
/// redis-sentinel://, ..., unix://): not a lock NAME (a misplaced --url).
bool looks_like_url(std::string_view text);

/// What of a lock token may be shown: its first 8 characters, and never more
/// than half of it (a short custom token must not be printed whole).
std::string token_prefix(std::string_view token);

/// "250 ms", "1.5 s", "2 min" — for messages.
std::string format_duration_ms(long long milliseconds);

/// Writes one-line messages to stderr, redacted; `verbose` lines only when
/// enabled. Thread-safe (lockon's watchdog thread reports through it).
class Reporter {
 public:
  explicit Reporter(bool verbose = false) : verbose_(verbose) {}

  bool verbose() const noexcept { return verbose_; }
  Redactor& redactor() noexcept { return redactor_; }

  /// "lockon: <message>" — always printed.
  void error(std::string_view message) const;
  /// "lockon: <message>" — only with --verbose.
  void info(std::string_view message) const;

 private:
  void write(std::string_view message) const;

  bool verbose_ = false;
  Redactor redactor_{};
};

/// The exit status for an exception thrown by lockon (see exit_codes.hpp):
/// ConfigError → usage, AuthError → auth, WrongTypeError → not_a_lock,
/// IoError/ReplyError/PoolTimeoutError/QuorumError → unavailable, else
/// internal.
int exit_code_for(const std::exception& error) noexcept;

/// The exception's message on one line (newlines folded into "; ").
std::string one_line(std::string_view text);

/// Reports `error` as "lockon: <context>: <cause>" and returns its exit code.
int report_failure(const Reporter& reporter, std::string_view context, std::exception_ptr error);

}  // namespace lockon::cli
