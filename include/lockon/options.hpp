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
#include <vector>

namespace lockon {

/// TLS settings (`rediss://`, `rediss-sentinel://`, `rediss-cluster://`).
/// Names follow redis-cli's flags; each is also a URL query parameter
/// (`?cacert=/path&sni=name`). Verification of the server's certificate
/// chain and host name is on unless `insecure` is set explicitly.
struct TlsOptions {
  /// Whether connections use TLS (set by the `rediss` schemes).
  bool enabled = false;
  /// PEM file of trusted CA certificates. With cacertdir also empty, the
  /// system's default store is used.
  std::string cacert{};
  /// Directory of trusted CA certificates (hashed names, `openssl rehash`).
  std::string cacertdir{};
  /// Client certificate (PEM) for mutual TLS; needs `key`.
  std::string cert{};
  /// Private key (PEM) of `cert`, unencrypted. lockon takes no pass phrase
  /// and never prompts for one: an encrypted key is a TlsError ("it is
  /// encrypted") on the first connect.
  std::string key{};
  /// Server name sent in the handshake (SNI) and checked against the
  /// certificate. Empty: the host the connection goes to.
  std::string sni{};
  /// Skip all verification of the server's certificate. Never a default;
  /// for tests and throwaway set-ups only.
  bool insecure = false;
};

/// What kind of Redis deployment the options describe.
enum class Deployment {
  standalone,  ///< one server (host/port or unix_path)
  sentinel,    ///< a master found through Redis Sentinel (`seeds` are sentinels)
  cluster,     ///< Redis Cluster (`seeds` are any of its nodes)
};

/// One host:port, as listed in a Sentinel or Cluster URL.
struct NodeAddress {
  std::string host;
  int port = 6379;
  friend bool operator==(const NodeAddress&, const NodeAddress&) = default;
};

/// The largest timeout the client accepts (ten years; larger ones are a
/// ConfigError): a deadline now() + timeout must stay within the steady
/// clock's range (~292 years of nanoseconds). Use 0 for "no bound".
inline constexpr std::chrono::milliseconds kMaxTimeout{10LL * 365 * 24 * 3600 * 1000};

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
  /// TLS; off unless a `rediss` scheme or `tls.enabled`.
  TlsOptions tls{};
  /// Automatic pipelining (on by default; URL `auto_pipeline=0` turns it
  /// off): on a single server (Standalone; Sentinel and Cluster use the
  /// pool), the lock layer's exchanges from all threads share one
  /// connection per Client, and requests that arrive while others are in
  /// flight are written together (see docs/client-layer.md). One thread
  /// costs what a pooled connection costs; 64 threads through one Client
  /// run 2-2.5x the pool's lock cycles/s (docs/benchmarks.md). A caller's
  /// deadline passing while its reply is owed fails that call alone
  /// (TimeoutError, outcome unknown); the socket timeout passing with
  /// replies owed and none arriving fails every call in flight on it.
  /// Pub/sub, the watchdog, Redlock, WAIT and Client::command always use
  /// pooled connections.
  bool auto_pipeline = true;
  /// With auto_pipeline: while replies are owed, the pipeline's I/O thread
  /// polls the socket for up to this long, yielding the CPU between looks,
  /// before it sleeps in poll(): a reply arriving meanwhile is read without
  /// a scheduler wake-up (64 threads through one Client: ~0.66-0.70 of the
  /// server's capacity for the same commands without, ~0.73-0.82 with, at
  /// the same client CPU per cycle; docs/benchmarks.md, session 10). At
  /// most this much per reply awaited. 0: always sleep. Must be ≥ 0.
  std::chrono::microseconds reply_spin{200};

  /// Standalone (default), Sentinel or Cluster. For sentinel and cluster,
  /// `seeds` lists the sentinels / seed nodes; host and port are the first
  /// seed and are replaced by the node actually in use.
  Deployment deployment = Deployment::standalone;
  std::vector<NodeAddress> seeds{};
  /// Sentinel: the monitored master's name (the URL's `#fragment`).
  std::string master_name{};
  /// Sentinel: credentials for the sentinels themselves (URL user/password
  /// are the master's). Empty: sentinels are contacted without AUTH.
  std::string sentinel_user{};
  std::string sentinel_password{};

  /// "host:port", "[v6]:port" or "unix:/path" — for messages and logs;
  /// "sentinel:NAME@h:p,h:p" and "cluster:h:p,h:p" for those deployments.
  /// Never contains credentials.
  std::string endpoint() const;

  /// Parses
  ///   redis://[[user]:password@]host[:port][/db][?query]
  ///   rediss://...                      (TLS, same form)
  ///   unix:///path/to.sock[?db=N&...]
  ///   redis-sentinel://[[user]:password@]host:port[,host:port...][/db][?query]#master
  ///   rediss-sentinel://...             (TLS to sentinels and master)
  ///   redis-cluster://[[user]:password@]host:port[,host:port...][?query]
  ///   rediss-cluster://...              (TLS)
  /// Host may be a name, an IPv4 address or a bracketed IPv6 address
  /// ("[::1]"). Query parameters: `connect_timeout`, `socket_timeout`
  /// (durations, see parse_duration), `db`, `keepalive`, `auto_pipeline` (0/1/true/false);
  /// with a `rediss` scheme also `cacert`, `cacertdir`, `cert`, `key`, `sni`
  /// (percent-decoded) and `insecure` (true/false). A cluster URL takes no
  /// database index (Cluster has only db 0); a sentinel URL needs `#master`.
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

/// Parses a duration such as "250ms", "1.5s", "10s", "2m", "1h", or parts
/// from the largest unit to the smallest: "2m30s", "1h30m", "1s500ms" (Go's
/// time.ParseDuration spelling). A bare number means milliseconds. Rejects negatives, garbage and overflow with
/// ConfigError; a positive value below 1 ms ("100us", "0.4") is 1 ms, never
/// 0 (which means "no bound" for a timeout). Used for URL query parameters
/// and the command-line tool.
std::chrono::milliseconds parse_duration(std::string_view text);

}  // namespace lockon
