// One request to "the node serving this key", following Redis Cluster's
// redirections: the one place where MOVED, ASK, TRYAGAIN and CLUSTERDOWN
// are handled for the lock layer and Client.
//
// Those replies mean the request did not run (the node refused it before
// executing anything; for MULTI/EXEC, EXEC aborts), so resending is safe:
//   MOVED        the topology fixes that slot; retried at once on the owner;
//   ASK          retried once on the target, preceded by ASKING;
//   TRYAGAIN     (a multi-key request during a slot migration) and
//   CLUSTERDOWN  (a failover under way) are retried after a back-off that
//                doubles from 1 ms to 100 ms.
// Everything is bounded by the caller's deadline (or, without one, by the
// larger of the socket timeout and one second: routing_bound), back-offs
// included (RetryBackoff never sleeps past it), and so is the wait for the
// map's re-read (ClusterTopology: null node, nothing sent). MOVED and ASK also count
// against kMaxRoutedAttempts (a redirection loop); waits for a migration or
// a failover (TRYAGAIN, CLUSTERDOWN, no owner, connection refused) count
// only against the time bound (and kMaxRoutedWaits), because a slot's
// migration outlasts 16 short back-offs — the async front does the same.
// When they run out the last reply is returned and the caller maps it like any
// error reply (ServerBusyError). A connection failure (ConnectError: nothing
// was sent) makes the topology re-read the map and is retried the same way;
// any other I/O failure leaves the outcome unknown and is thrown as is.
// A node silent until the caller's deadline marks the map stale too (it may
// be frozen, its slots failed over to a replica the map does not know).
//
// One server (no cluster): a straight call, no loop; a MOVED or ASK there
// is a ConfigError (a redis:// URL naming a cluster node).
// Sentinel: a READONLY is sent again to whatever master a new resolution
// finds, as ReadOnlyRetry says (client/retry_rules.hpp, the Asio front's
// rule too); at the bound the last error is thrown.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "client/hiredis_handles.hpp"
#include "client/retry_rules.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

enum class RedirectKind { none, moved, ask, retry };

struct Redirect {
  RedirectKind kind = RedirectKind::none;
  NodeAddress target{};  // moved / ask
};

/// Classifies an error reply ("MOVED 12182 127.0.0.1:7002", "ASK ...",
/// "TRYAGAIN ...", "CLUSTERDOWN ..."); kind none for anything else.
Redirect redirect_of(std::string_view error_text) noexcept;

inline const redisReply* first_redirect(const ReplyPtr& reply) noexcept {
  return reply && reply->type == REDIS_REPLY_ERROR && redirect_of({reply->str, reply->len}).kind != RedirectKind::none
             ? reply.get()
             : nullptr;
}
inline const redisReply* first_redirect(const std::vector<ReplyPtr>& replies) noexcept {
  for (const ReplyPtr& reply : replies)
    if (const redisReply* found = first_redirect(reply)) return found;
  return nullptr;
}
/// Whether a pipeline was partly refused: some keyed command ran and another
/// got a redirection. During a slot migration the source runs the commands
/// whose keys it still has and answers ASK (or TRYAGAIN, for a script over
/// keys it has only some of) for the others; resending the pipeline whole
/// would run the ones that ran a second time, elsewhere (a lock's SET K NX
/// lost on the source, K held there, and won on the ASK target: two
/// holders). A keyless WAIT runs wherever it is sent: it does not count.
/// For the lock layer's own pipelines (commands in upper case); a caller's
/// pipeline resends its refused commands alone (routed_pipeline.hpp).
inline bool partly_refused(std::span<const std::span<const std::string_view>> commands,
                           const std::vector<ReplyPtr>& replies) noexcept {
  bool ran = false;
  bool refused = false;
  for (std::size_t i = 0; i < commands.size() && i < replies.size(); ++i) {
    if (!commands[i].empty() && commands[i][0] == "WAIT") continue;
    (first_redirect(replies[i]) != nullptr ? refused : ran) = true;
  }
  return ran && refused;
}
inline bool has_replies(const ReplyPtr& reply) noexcept { return reply != nullptr; }
inline bool has_replies(const std::vector<ReplyPtr>& replies) noexcept { return !replies.empty(); }

/// A client that follows no redirections got one: ConfigError (error_map.hpp).
inline void check_not_cluster_redirect(const ReplyPtr& reply, std::string_view endpoint) {
  if (reply) check_not_cluster_redirect(*reply, endpoint, "request");
}
inline void check_not_cluster_redirect(const std::vector<ReplyPtr>& replies, std::string_view endpoint) {
  for (const ReplyPtr& reply : replies) check_not_cluster_redirect(reply, endpoint);
}

/// Runs `exchange(Connection&, Node&)` (returning ReplyPtr or
/// std::vector<ReplyPtr>; null/empty = the caller's deadline passed) on the
/// node serving `key`, following redirections as described above.
template <class Exchange>
auto routed_call(ClientImpl& client, std::string_view key, std::chrono::steady_clock::time_point until,
                 Exchange&& exchange) -> decltype(exchange(std::declval<Connection&>(), std::declval<Node&>())) {
  using Clock = std::chrono::steady_clock;
  if (client.options().deployment != Deployment::cluster) {
    // One server, or Sentinel's current master: a straight call. READONLY
    // and I/O failures are reported (Sentinel re-resolves the master), and
    // with Sentinel a READONLY is sent again (above).
    ReadOnlyRetry readonly_retry(client.options().deployment == Deployment::sentinel,
                                 routing_bound(client.options(), until, Clock::now()));
    const auto wait = [](std::optional<Clock::duration> pause) {
      if (pause) std::this_thread::sleep_for(*pause);
      return pause.has_value();
    };
    for (;;) {
      std::shared_ptr<Node> node;  // outlives the lease
      try {
        node = client.node_for(key, until);
      } catch (const ConnectError&) {
        // No master found (the sentinels still name the replica).
        if (wait(readonly_retry.after_no_master())) continue;
        throw;
      }
      if (!node) return {};  // the deadline passed while resolving (Sentinel): nothing was sent
      try {
        // The caller's deadline bounds the wait for a pooled connection too.
        auto lease = node->pool().borrow_by(until);
        if (!lease) return {};  // it passed first: nothing was sent
        auto& connection = *lease;
        auto result = exchange(*connection, *node);
        // A MOVED or ASK here: the URL names a cluster node (a wrong URL, not
        // a busy server; the redirected requests did not run).
        check_not_cluster_redirect(result, node->endpoint());
        if (const redisReply* readonly = first_readonly(result)) {
          client.topology().report_error_reply(*node, {readonly->str, readonly->len});
          if (wait(readonly_retry.after_readonly(!nothing_ran(result)))) continue;
        }
        return result;
      } catch (const ReadOnlyError&) {
        client.topology().report_error_reply(*node, "READONLY");
        if (wait(readonly_retry.after_readonly(false))) continue;
        throw;
      } catch (const IoError&) {
        client.topology().report_io_failure(*node);
        throw;
      }
    }
  }
  Topology& topology = client.topology();
  const auto bound = routing_bound(client.options(), until, Clock::now());
  RetryBackoff backoff(bound);
  const auto pause = [&] {
    const auto delay = backoff.next();
    if (delay == Clock::duration::zero()) return false;
    std::this_thread::sleep_for(delay);
    return true;
  };
  // ASK target (a plain pair rather than std::optional: GCC 12 warns on
  // optional<struct with string> here).
  bool asking = false;
  NodeAddress ask_target;
  int redirects = 0;
  for (int attempt = 1;; ++attempt) {
    std::shared_ptr<Node> node;
    try {
      node = asking ? topology.node_at(ask_target) : nullptr;
      if (!node) node = client.node_for(key, until);
    } catch (const ServerBusyError&) {
      // No master serves the slot right now (a failover under way).
      if (attempt < kMaxRoutedWaits && pause()) continue;
      throw;
    }
    decltype(exchange(std::declval<Connection&>(), std::declval<Node&>())) result;
    if (!node) return result;  // the deadline passed while the map was read: nothing was sent
    try {
      auto lease = node->pool().borrow_by(until);
      if (!lease) return result;  // the caller's deadline passed first: nothing was sent
      auto& connection = *lease;
      // ASKING before each command outside a transaction (client/asking.hpp).
      struct AskingMode {
        Connection* connection = nullptr;
        ~AskingMode() {
          if (connection != nullptr) connection->set_asking(false);
        }
      } asking_mode;
      if (asking) {
        connection->ensure_connected();
        connection->set_asking(true);
        asking_mode.connection = &*connection;
      }
      result = exchange(*connection, *node);
      // Silent until the caller's deadline: frozen, maybe failed over.
      if (!has_replies(result)) topology.report_io_failure(*node);
    } catch (const ConnectError&) {
      topology.report_io_failure(*node);
      asking = false;
      if (attempt < kMaxRoutedWaits && pause()) continue;
      throw;
    } catch (const IoError&) {
      topology.report_io_failure(*node);
      throw;
    }
    const redisReply* redirect = has_replies(result) ? first_redirect(result) : nullptr;
    if (redirect == nullptr) return result;
    const std::string_view text(redirect->str, redirect->len);
    topology.report_error_reply(*node, text);
    const Redirect what = redirect_of(text);
    if (what.kind != RedirectKind::retry) ++redirects;
    if (redirects >= kMaxRoutedAttempts || attempt >= kMaxRoutedWaits || Clock::now() >= bound) return result;
    // A TRYAGAIN from the ASK target is retried there (with ASKING again):
    // going back to the source would only be sent to the target again, and
    // count an ASK per back-off.
    const bool ask_again = asking && what.kind == RedirectKind::retry;
    asking = what.kind == RedirectKind::ask || ask_again;
    if (what.kind == RedirectKind::ask) {
      ask_target = what.target;
    } else if (what.kind == RedirectKind::retry || redirects > 2) {
      // A MOVED right after a MOVED: the map is in flux (failover); wait.
      if (!pause()) return result;
    }
  }
}

}  // namespace lockon::detail
