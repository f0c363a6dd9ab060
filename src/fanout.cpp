#include "fanout.hpp"

#include <algorithm>

namespace lockon::detail {

std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, std::chrono::milliseconds per_node_timeout,
                                  std::string_view operation) {
  using Clock = std::chrono::steady_clock;
  std::vector<FanOutResult> results(targets.size());
  std::vector<bool> sent(targets.size(), false);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    try {
      Connection& connection = *targets[i].connection;
      connection.ensure_connected();
      targets[i].send(connection);
      connection.flush(operation);
      sent[i] = true;
    } catch (...) {
      targets[i].connection->mark_broken();
      results[i].error = std::current_exception();
    }
  }
  const auto deadline = Clock::now() + per_node_timeout;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!sent[i]) continue;
    Connection& connection = *targets[i].connection;
    try {
      // Replies that arrived while we read earlier nodes are already in the
      // socket buffer: the shared deadline only bounds the genuinely slow.
      ReplyPtr reply = connection.read_reply_until(deadline, operation);
      if (targets[i].finish) reply = targets[i].finish(connection, std::move(reply));
      results[i].reply = std::move(reply);
    } catch (...) {
      connection.mark_broken();
      results[i].error = std::current_exception();
    }
  }
  return results;
}

}  // namespace lockon::detail
