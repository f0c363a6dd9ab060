// support/redis_server.hpp — throwaway redis-server processes for tests and
// benchmarks (RawConnection, to talk to them without lockon, comes along).
//
// Each RedisServer is a real `redis-server` bound to 127.0.0.1 on a free port,
// with no persistence, its own temporary directory (log inside) and a known
// PID, so a test can crash it (kill), freeze it (pause), or restart it empty
// on the same port. If a server cannot be started the constructor throws with
// the server's log tail: tests fail loudly, they never skip.
//
// Ports are chosen below the kernel's ephemeral range so that a client's own
// outgoing connections can never occupy (or self-connect to) a server's port
// while it is down between kill() and restart().
//
// Not thread-safe: drive one RedisServer from one thread at a time (lockon
// clients talking to it from other threads are of course fine).
//
// No GoogleTest here: benchmarks reuse this.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/raw_connection.hpp"

namespace lockon::test {

// Every member has a default initializer so that designated initializers
// (`{.requirepass = "x"}`) do not trip -Wmissing-field-initializers on GCC 12.
struct ServerOptions {
  /// Password of the default user (`requirepass`); empty: no password.
  std::string requirepass{};
  /// One ACL rule line per user, exactly as after `ACL SETUSER`, e.g.
  /// "alice on >s3cret ~* &* +@all". Passed as `--user <tokens...>`.
  std::vector<std::string> acl_users{};
  /// Extra command-line tokens passed verbatim, one argv element each, e.g.
  /// {"--maxmemory", "10mb", "--maxmemory-policy", "noeviction"}.
  std::vector<std::string> extra_args{};
};

/// A free loopback port below the ephemeral range, reserved for this
/// process until release_free_port() (for extra listeners such as a TLS port).
int reserve_free_port();
void release_free_port(int port);

class RedisServer {
 public:
  /// Starts a server and waits (≤ 5 s per attempt, a few attempts on port
  /// races) until it answers PING. Throws std::runtime_error with the log
  /// tail if it cannot.
  explicit RedisServer(ServerOptions options = {});
  /// SIGKILLs it (nothing is persisted, and a graceful SIGTERM costs ~100 ms),
  /// reaps it, removes its directory.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  RedisServer(RedisServer&&) = delete;
  RedisServer& operator=(RedisServer&&) = delete;

  int port() const noexcept { return port_; }
  /// PID of the running server, -1 once it was killed/stopped.
  pid_t pid() const noexcept { return pid_; }
  /// False once the process has exited (reaps it if it just did).
  bool running() const;
  bool paused() const noexcept { return paused_; }
  std::string host() const { return "127.0.0.1"; }
  /// "redis://127.0.0.1:PORT", or "redis://:PASS@127.0.0.1:PORT" with a
  /// requirepass (percent-encoded).
  std::string url() const;
  std::string url_without_auth() const;
  const ServerOptions& options() const noexcept { return options_; }
  /// Its private directory (redis.log lives there).
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// The last `lines` lines of the server's log, for failure messages.
  std::string log_tail(std::size_t lines = 30) const;

  /// SIGKILL and reap: a crash. Connections see a reset; the port refuses.
  void kill();
  /// SIGTERM and reap (SIGKILL if it takes more than 3 s). Redis notices
  /// SIGTERM in its next cron tick: this takes up to ~100 ms.
  void stop();
  /// SIGSTOP: the port still accepts connections but nothing is answered.
  /// Returns once the process is actually stopped.
  void pause();
  /// SIGCONT; returns once the process runs again.
  void resume();
  /// Starts a fresh server (empty: nothing is persisted) on the same port,
  /// retrying for ~2 s if the port is still busy, and waits for PING. Stops
  /// the current process first if it is still running. Throws like the
  /// constructor.
  void restart();

  /// A raw connection as the default user (AUTH requirepass if set).
  RawConnection connect() const;
  /// A raw connection with explicit credentials and timeouts.
  RawConnection connect(const RawConnectOptions& options) const;
  /// One command on a fresh raw connection (convenience for assertions).
  RawReply command(const std::vector<std::string>& args) const;

 private:
  struct Deferred {};
  // Picks a port and launches the process without waiting for it.
  RedisServer(ServerOptions options, Deferred);
  friend std::vector<std::unique_ptr<RedisServer>> start_servers(std::size_t, ServerOptions);

  enum class Outcome { ready, port_busy, failed };
  void launch();
  Outcome await_ready(std::chrono::milliseconds timeout, std::string& why);
  void finish_fresh_start();
  void terminate(int signal, std::chrono::milliseconds grace);
  [[noreturn]] void fail(const std::string& why);
  std::string new_log_text() const;

  ServerOptions options_;
  std::filesystem::path dir_;
  int port_ = 0;
  mutable pid_t pid_ = -1;
  bool paused_ = false;
  // Where the current run's output starts in the (appended) log files, so an
  // old "Ready to accept connections" never counts for a restart.
  std::uintmax_t log_offset_ = 0;
  std::uintmax_t stdout_offset_ = 0;
};

/// Starts `n` servers on distinct ports; their startups overlap (all are
/// launched before any is waited for). Throws like RedisServer's constructor.
std::vector<std::unique_ptr<RedisServer>> start_servers(std::size_t n, ServerOptions options = {});

/// commandstats_calls_in (raw_connection.hpp) of `server`.
inline long long commandstats_calls(const RedisServer& server, const std::string& command) {
  return commandstats_calls_in(server.command({"INFO", "commandstats"}).str, command);
}

}  // namespace lockon::test
