// support/fault_proxy.hpp — a RESP-aware TCP proxy in front of a real
// redis-server, run in-process on its own thread, that injects faults at the
// level of single commands (delay, lost request, lost reply, truncated reply,
// error reply, partition) or of whole connections (latency, refusal, drop,
// partition, failover). No GoogleTest here: benchmarks reuse it.
//
// How to use it:
//
//   RedisServer server;
//   FaultProxy proxy(server.host(), server.port());
//   lockon::Client client(proxy.url());            // talk through the proxy
//   // The next SET on any connection is answered READONLY; Redis never sees it.
//   const int rule = proxy.add_rule({.command = "SET",
//                                    .action = FaultAction::error_reply,
//                                    .error = FaultRule::error_text("READONLY"),
//                                    .times = 1});
//   ... drive the code under test ...
//   EXPECT_EQ(proxy.matched(rule), 1u);
//   proxy.set_latency(250us);                      // every byte, each way
//   proxy.blackhole(true);                         // partition; false heals it
//   proxy.drop_connections();                      // every connection, now
//
// To learn that a fault happened, await the rule's count (a bounded poll such
// as fixtures.hpp's eventually(1s, [&] { return proxy.matched(rule) > 0; })),
// and check the server's state directly (server.command(...)), not through
// the proxy. Several proxies (say one per Redlock node) can share one thread:
// `auto t = FaultProxy::make_thread(); FaultProxy a(h, p1, t), b(h, p2, t);`.
// lockon's Client opens its pooled connections lazily, so `connection = N`
// means the N-th connection the code under test happened to open.
//
// Model. Every client connection gets its own upstream connection. The proxy
// parses the client's byte stream into commands (RESP multibulk or inline,
// pipelined or split across reads) and the server's stream into replies, and
// pairs them in order, so a rule acts on exactly one command and its own reply.
// Rules are checked in insertion order when a command has been fully received;
// the first match wins and its action applies to that command:
//  - delay holds it (and, as TCP keeps order, everything behind it);
//  - close_before_forward / close_after_forward / close_mid_reply / blackhole
//    also stop forwarding the client's later commands on that connection (they
//    are lost with it); replies to earlier commands are still delivered first;
//  - close_after_forward closes the client connection once the server's reply
//    has arrived (and is dropped): when the client sees EOF the command HAS
//    been executed. close_mid_reply likewise waits for the reply and delivers
//    its first half (at least one byte, never all of it) before closing;
//  - error_reply answers "-<error>\r\n" in the command's place (after the
//    replies to earlier commands), and later commands flow on normally.
// Once a connection runs SUBSCRIBE/PSUBSCRIBE/SSUBSCRIBE, MONITOR or (a replica)
// PSYNC/SYNC, the server's bytes on it are forwarded as they come, without
// pairing (push messages are not replies); close_after_forward and
// close_mid_reply then close at once after forwarding. RESP3 '>' pushes are
// always forwarded unpaired. CLIENT REPLY OFF/SKIP (replies that never come)
// would break the pairing.
//
// Limits: a single command or reply larger than 64 MiB closes its connection;
// each direction buffers at most ~1 MiB of complete messages before it stops
// reading (TCP back-pressure), so memory per connection is bounded.
// Connections are numbered 0, 1, ... in the order they are accepted (those
// refused by refuse_new_connections() get no number). If the upstream refuses
// a connection, the proxy resets the client's; if the upstream closes one, the
// client gets what was sent before, then EOF.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::test {

enum class FaultAction {
  pass,                  // forward unchanged
  delay,                 // hold the command `delay` before forwarding it
  close_before_forward,  // close the client connection instead of forwarding (server never sees it)
  close_after_forward,   // forward, then close the client connection before any reply byte reaches it
  close_mid_reply,       // forward; deliver only part of the reply to this command, then close
  error_reply,           // do not forward; answer "-<error>\r\n" in the command's place
  blackhole,             // do not forward and never answer; the connection stays open (partition)
};

// Every member has a default initializer so that designated initializers
// do not trip -Wmissing-field-initializers.
struct FaultRule {
  std::string command{};            // upper-cased command name to match ("SET", "EVALSHA", "MULTI"); empty = any
  std::string argument_contains{};  // if set, some argument must contain this substring
  FaultAction action = FaultAction::pass;
  std::string error{};              // for error_reply, e.g. FaultRule::error_text("READONLY"); empty: "ERR ..."
  std::chrono::microseconds delay{0};
  int times = -1;                   // apply to this many matches, then the rule is spent; -1 = forever
  int connection = -1;              // only on the N-th accepted connection (0-based); -1 = all
  /// Canonical Redis error text (without the leading '-') for OOM, READONLY,
  /// NOPERM, LOADING, BUSY, MASTERDOWN, TRYAGAIN, NOSCRIPT (as Redis 7 words
  /// them); any other code gives "<code> error injected by FaultProxy".
  static std::string error_text(std::string_view code);
};

class FaultProxy {
 public:
  /// The thread (one poll loop) that serves proxies. Opaque; share it through
  /// make_thread() and the three-argument constructor.
  class Thread;

  /// Listens on 127.0.0.1:<free port> and forwards each accepted connection to
  /// upstream (an IPv4 address, e.g. "127.0.0.1"), on a thread of its own.
  /// Throws std::runtime_error on failure.
  FaultProxy(std::string upstream_host, int upstream_port);
  /// The same, served by `thread` together with every other proxy built with
  /// it. Like one switch in front of several hosts: a request fanned out to N
  /// nodes through N proxies is forwarded in one wake-up, so latency emulation
  /// adds no per-node scheduling delays (separate threads would compete for
  /// the cores with the client and the servers). Rules and knobs stay per proxy.
  FaultProxy(std::string upstream_host, int upstream_port, std::shared_ptr<Thread> thread);
  /// A new proxy thread for the constructor above; it runs until the last
  /// proxy using it (and the last shared_ptr) is gone. Throws std::runtime_error.
  static std::shared_ptr<Thread> make_thread();
  /// Closes this proxy's listener and connections (clients see EOF); stops the
  /// thread if no other proxy shares it.
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const noexcept { return port_; }
  std::string host() const { return "127.0.0.1"; }
  /// "redis://127.0.0.1:<port>" (add credentials yourself if the server needs them).
  std::string url() const;

  // Everything below is thread-safe, never blocks for long, and takes effect
  // for the next command the proxy parses.

  /// Returns the rule's id. Rules are checked in insertion order; first match wins.
  int add_rule(FaultRule rule);
  /// Unknown or already removed ids are ignored.
  void remove_rule(int id);
  void clear_rules();
  /// How many commands the rule has fired on (kept after removal; 0 if unknown).
  std::size_t matched(int id) const;

  /// Holds every byte this long in each direction (0 = none). Like a network,
  /// it delays without serializing: many commands can be in flight at once.
  void set_latency(std::chrono::microseconds each_way);
  /// On: new clients are accepted and closed at once with a reset (RST).
  void refuse_new_connections(bool on);
  /// On: a partition — nothing is forwarded either way, sockets stay open and
  /// new connections are accepted but get no traffic. Off: traffic resumes and
  /// the bytes held meanwhile are forwarded (a healed partition).
  void blackhole(bool on);
  /// Closes every proxied connection (both sides); returns once done.
  void drop_connections();
  /// New connections go to host:port; existing ones stay where they are
  /// (call drop_connections() too to move everyone).
  void retarget(std::string host, int port);

  /// Live proxied connections.
  std::size_t connection_count() const;
  /// Connections proxied so far (the next one gets this index).
  std::size_t connections_accepted() const;
  /// Commands parsed from clients so far (all connections).
  std::size_t commands_seen() const;

 private:
  struct Link;  // one proxied connection (fault_proxy_link.cpp)
  struct RuleSlot {
    int id;
    FaultRule rule;
    bool active;
    std::size_t matched;
  };
  struct Decision {
    FaultAction action = FaultAction::pass;
    std::string error{};
    std::chrono::microseconds delay{0};
  };
  // Called by the loop thread for each parsed command.
  Decision decide(std::size_t connection, std::string_view name,
                  const std::vector<std::string_view>& arguments);
  void wake() const noexcept;

  int port_ = 0;
  int listen_fd_ = -1;
  std::shared_ptr<Thread> thread_;

  mutable std::mutex mutex_;  // guards the members below
  std::vector<RuleSlot> rules_;
  int next_rule_id_ = 1;
  std::string upstream_host_;
  int upstream_port_;
  std::size_t drop_requests_ = 0;  // drop_connections() calls so far
  std::size_t drops_done_ = 0;     // of those, handled by the loop
  std::condition_variable drops_cv_;

  std::atomic<long long> latency_us_{0};
  std::atomic<bool> refuse_{false};
  std::atomic<bool> blackholed_{false};
  std::atomic<std::size_t> live_connections_{0};
  std::atomic<std::size_t> accepted_{0};
  std::atomic<std::size_t> commands_seen_{0};
};

}  // namespace lockon::test
