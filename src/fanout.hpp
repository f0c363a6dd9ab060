// Send one request to several servers, then collect all replies, so that N
// servers cost about the slowest round trip instead of the sum.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace lockon::detail {

struct FanOutTarget {
  Connection* connection = nullptr;
  /// Queues the request(s) on the connection (no I/O); exactly one reply is
  /// read back per target.
  std::function<void(Connection&)> send;
  /// Optional post-processing of the reply on the same connection, e.g. the
  /// NOSCRIPT → EVAL fallback.
  std::function<ReplyPtr(Connection&, ReplyPtr)> finish;
};

struct FanOutResult {
  ReplyPtr reply;            // set on success (may be an error reply)
  std::exception_ptr error;  // set when the connection failed (IoError...)
};

/// Connects where needed, writes every request, then reads every reply with
/// one shared deadline of `per_node_timeout` from the start of the reads.
/// A node that fails or times out gets an `error`; others are unaffected.
/// Never throws for a node's failure.
std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, std::chrono::milliseconds per_node_timeout,
                                  std::string_view operation);

}  // namespace lockon::detail
