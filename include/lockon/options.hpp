// lockon/options.hpp — how to reach a Redis server, as plain structs.
//
// Options are plain aggregates with documented defaults; `from_url` fills
// them from a URL. Durations are std::chrono types; where 0 has a special
// meaning, the field says so.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace lockon {

/// Where and how to connect to one Redis server.
struct ConnectionOptions {
  /// TCP host name or address. IPv6 literals are written without brackets.
  std::string host = "127.0.0.1";
  /// TCP port, 1..65535.
  int port = 6379;
  /// Unix socket path; when non-empty, host and port are ignored.
  std::string unix_path{};
  /// ACL user name. Empty with a password: `AUTH password` (the default user).
  std::string user{};
  /// Password; empty means no AUTH is sent.
  std::string password{};
  /// Database index selected after connecting (SELECT is skipped for 0).
  int db = 0;
  /// Bound on establishing the connection. 0 means the OS default (blocking).
  std::chrono::milliseconds connect_timeout{1000};
  /// Bound on each command's round trip. 0 means no bound (wait forever).
  std::chrono::milliseconds socket_timeout{1000};
  /// Enable TCP keep-alive probes so a silently dead peer is noticed.
  bool keepalive = true;

  /// "host:port", "[v6]:port" or "unix:/path" — for messages and logs.
  /// Never contains credentials.
  std::string endpoint() const;

  /// Parses
  ///   redis://[[user]:password@]host[:port][/db][?query]
  ///   unix:///path/to.sock[?db=N&...]
  /// Host may be a name, an IPv4 address or a bracketed IPv6 address
  /// ("[::1]"). Query parameters: `connect_timeout`, `socket_timeout`
  /// (durations, see parse_duration), `db`, `keepalive` (0/1/true/false).
  /// User and password are percent-decoded. Throws ConfigError naming what is
  /// wrong; the message never contains the password.
  static ConnectionOptions from_url(std::string_view url);
};

/// Bounds of the per-client connection pool.
struct PoolOptions {
  /// Maximum number of connections the pool opens. Must be >= 1.
  std::size_t size = 8;
  /// How long a borrower waits for a free connection before PoolTimeoutError.
  /// 0 means fail at once when every connection is busy.
  std::chrono::milliseconds wait_timeout{2000};
};

/// Parses a duration such as "250ms", "1.5s", "10s", "2m", "1h". A bare number
/// means milliseconds. Rejects negatives, garbage and overflow with
/// ConfigError. Used for URL query parameters and the command-line tool.
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace lockon
