// Send one request to several servers, then collect all replies, so that N
// servers cost about the slowest round trip instead of the sum.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "client/connection.hpp"

namespace lockon::detail {

struct FanOutTarget {
  Connection* connection = nullptr;
  /// Queues the request(s) on the connection (no I/O); exactly one reply is
  /// read back per target.
  std::function<void(Connection&)> send;
  /// Optional post-processing of the reply on the same connection, e.g. the
  /// NOSCRIPT → EVAL fallback.
  std::function<ReplyPtr(Connection&, ReplyPtr)> finish;
  /// fan_out_until_enough: once the outcome is decided, whether this
  /// target's reply is still waited for during a short grace period (as long
  /// as the decision took, at least 2 ms). False for a node the caller
  /// suspects is frozen: it is abandoned at once.
  bool grace_after_decided = true;
};

struct FanOutResult {
  ReplyPtr reply;            // set on success (may be an error reply)
  std::exception_ptr error;  // set when the connection failed (IoError...)
  bool sent = false;         // the request was written (false: the node certainly did not run it)
  bool abandoned = false;    // not waited for: the others had decided (fan_out_until_enough)
};

/// Connects where needed, writes every request, then reads every reply; the
/// whole exchange (connects included) shares one deadline.
///
/// Connects run in parallel: every target whose connection must be (re)opened
/// is first probed with a non-blocking connect and one PING, all awaited
/// together until the deadline. A node that accepts no connection (down
/// host, full accept queue, dropped SYNs), or accepts but does not answer (a
/// frozen server: the kernel accepts for it), therefore costs the deadline
/// once for the whole fan-out — not its connect_timeout, or its
/// socket_timeout in the handshake, per node in a row. A node that answered
/// the probe is then opened by Connection::ensure_connected (a second,
/// quick connect and the handshake) and written to at once. A node that
/// fails or times out gets an `error` (ConnectError when its probe did not
/// finish: nothing was sent); others are unaffected.
///
/// A reply not there by `deadline` is a TimeoutError (replies already in the
/// socket buffer are still taken after it). Blocks until every target is
/// settled or the deadline passed; never throws for a node's failure.
std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, std::chrono::steady_clock::time_point deadline,
                                  std::string_view operation);

/// Whether the results so far already decide the caller's question (e.g. a
/// majority answered). Looked at after each reply or failure.
using FanOutEnough = std::function<bool(std::span<const FanOutResult>)>;

/// As fan_out, but returns as soon as `enough` says so (plus the grace
/// period of targets marked grace_after_decided): targets still
/// connecting get a ConnectError (nothing sent), targets whose reply is
/// still owed a TimeoutError (outcome unknown), both marked `abandoned`;
/// their connections are marked broken. A frozen minority then costs
/// nothing instead of the whole deadline.
std::vector<FanOutResult> fan_out_until_enough(std::span<FanOutTarget> targets,
                                               std::chrono::steady_clock::time_point deadline,
                                               std::string_view operation, const FanOutEnough& enough);

/// fan_out with the deadline `per_node_timeout` from now.
inline std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, std::chrono::milliseconds per_node_timeout,
                                         std::string_view operation) {
  return fan_out(targets, std::chrono::steady_clock::now() + per_node_timeout, operation);
}

}  // namespace lockon::detail
