// tools/cli_options.hpp — the parsed command line of each sub-command, as
// plain structs (filled by CLI11 in main.cpp, validated by the commands).
#pragma once

#include <string>
#include <vector>

namespace lockon::cli {

/// What `run` does when the lease is lost while COMMAND runs.
enum class OnLost { term, ignore };

/// Server selection shared by run, status and release.
struct ServerOptions {
  /// As given with --url (repeatable); empty: $LOCKON_REDIS_URL, else the
  /// default URL. Several URLs mean Redlock.
  std::vector<std::string> urls{};
  /// TLS flags, named like redis-cli's (--cacert, --cacertdir, --cert,
  /// --key, --sni, --insecure). They apply to every rediss:// URL, over the
  /// URL's own query parameters; with a plain redis:// URL they are an error.
  std::string cacert{};
  std::string cacertdir{};
  std::string cert{};
  std::string key{};
  std::string sni{};
  bool insecure = false;
};

struct RunOptions {
  ServerOptions servers{};
  std::string name{};
  std::vector<std::string> command{};
  /// `lockon run NAME1 NAME2 ... -- COMMAND`: every name (all or none);
  /// then `name` is them joined by ',' for messages. Empty: just `name`.
  std::vector<std::string> names{};
  std::string ttl = "30s";
  bool nonblock = false;
  std::string wait{};  // empty: wait forever
  int conflict_exit_code = 1;
  std::string fence_env{};  // empty: no fencing
  int replicas = 0;                        // --replicas: WAIT for this many (0: off)
  std::string replica_timeout = "100ms";  // --replica-timeout
  OnLost on_lost = OnLost::term;
  std::string kill_after = "5s";
  bool verbose = false;
  std::string label{};  // --label: shown by `lockon status` as the holder's label
  bool shared = false;      // --shared: a reader's share of the ReadWriteLock NAME
  bool exclusive = false;   // --exclusive: the writer side of the ReadWriteLock NAME
  long long permits = 0;    // --permits N: one of N permits of the Semaphore NAME (0: off)
};

struct KeyOptions {
  std::string name{};
  std::vector<std::string> args{};  // TYPE:VALUE
  bool no_function = false;
  std::string prefix = "lockon";
};

struct InspectOptions {
  ServerOptions servers{};
  std::string key{};
  bool force = false;
  bool json = false;        // status: --json
  std::size_t limit = 100;  // list: --limit
};

/// The URLs to use: --url values, else $LOCKON_REDIS_URL (several may be
/// separated by whitespace), else redis://127.0.0.1:6379.
std::vector<std::string> resolve_urls(const ServerOptions& options);

/// The URL used when neither --url nor $LOCKON_REDIS_URL is given.
inline constexpr const char* kDefaultUrl = "redis://127.0.0.1:6379";
/// The environment variable naming the default server(s).
inline constexpr const char* kUrlEnvironmentVariable = "LOCKON_REDIS_URL";

}  // namespace lockon::cli
