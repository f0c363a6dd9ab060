// The async front on a Redis Cluster: the slot map, one AsyncConnection per
// master (made lazily) and one sharded AsyncSubscriber per master (made on
// the first wait there), and the routed exchange — the coroutine
// counterpart of ClusterTopology + routed_call (client/cluster_topology.hpp,
// client/routed.hpp), with the same rules:
//
// - the map is read with CLUSTER SHARDS (CLUSTER SLOTS before Redis 7; the
//   parsing and the order of the nodes asked are shared:
//   client/cluster_map.hpp) from a known master or a seed, on first use,
//   and again when stale (after MOVED, CLUSTERDOWN, a connection failure or
//   a node silent until a caller's deadline): one read at a time, at most
//   every kRefreshInterval, on its own coroutine, each node's read bounded
//   by map_read_budget; callers route with the map they have, and one whose
//   slot has no owner waits for the read until its deadline (null node:
//   nothing sent), as ClusterTopology does;
// - MOVED fixes its slot at once and the request is resent to the owner;
//   ASK resends once to the named node, preceded by ASKING (in the same
//   write); TRYAGAIN/CLUSTERDOWN are resent after a back-off doubling from
//   1 ms to 100 ms, never past the bound (RetryBackoff, routed.hpp); a
//   ConnectError (nothing sent) is retried likewise. Those
//   replies mean the request did not run, so resending is safe. Bounded by
//   the caller's deadline (without one: max(socket timeout, 1 s)); MOVED and
//   ASK also by kMaxRoutedAttempts (the waits for a migration only by time,
//   unlike routed_call: a half-moved slot answers multi-key requests ASK
//   then TRYAGAIN until it ends); then the last reply is returned (mapped by
//   the caller). Any other I/O failure leaves the outcome unknown: thrown.
//
// Everything runs on the client's executor: no locks, no blocking call.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "async/async_connection.hpp"
#include "async/async_subscriber.hpp"
#include "client/cluster_map.hpp"
#include "client/slots.hpp"

namespace lockon::detail {

/// Closes `old` once no reply is owed on it (at most after `bound`): closing
/// at once would turn requests that ran into ClosedErrors.
void retire_when_idle(std::shared_ptr<AsyncConnection> old, std::chrono::milliseconds bound) noexcept;

class AsyncCluster : public std::enable_shared_from_this<AsyncCluster> {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kRefreshInterval = std::chrono::milliseconds(100);

  struct Node {
    ConnectionOptions options;  // standalone, this master's host and port
    std::shared_ptr<AsyncConnection> connection;
    std::shared_ptr<AsyncSubscriber> subscriber;  // made on the first wait here
  };

  /// A routed exchange's replies and the connection that gave them.
  struct Routed {
    AsyncConnection::Outcome outcome;
    std::shared_ptr<AsyncConnection> connection;
  };

  AsyncCluster(asio::any_io_executor executor, const ConnectionOptions& options,
               std::chrono::milliseconds reconnect_delay);

  /// Sends `resp` (owing `replies`) to the master serving `key`'s slot
  /// (empty key: any master), following redirections as described above.
  /// A pipeline of several commands passes them as `commands` too (`resp`
  /// is their encoding): after an ASK they are re-encoded with ASKING before
  /// each command outside a transaction (client/asking.hpp). A pipeline
  /// partly refused (routed.hpp, partly_refused) is returned as it is.
  asio::awaitable<Routed> exchange(std::string_view key, const std::string& resp, std::size_t replies,
                                   Clock::time_point until, std::string_view operation,
                                   std::span<const std::span<const std::string_view>> commands = {});

  /// The id every master's sharded subscriber has (made or not).
  const std::string& subscriber_id() const noexcept { return subscriber_id_; }
  /// The sharded subscriber of the master serving `key` now; null when
  /// `until` passed while the map was read (the slot had no owner).
  asio::awaitable<std::shared_ptr<AsyncSubscriber>> subscriber_for(std::string_view key, Clock::time_point until);

  /// Closes every connection and subscriber (waiters poll).
  void close() noexcept;

  /// How many times the map was read (tests).
  std::uint64_t refreshes() const noexcept { return refreshes_; }

 private:
  asio::awaitable<std::shared_ptr<Node>> node_for_slot(int slot, Clock::time_point until);
  std::shared_ptr<Node> node_at(const NodeAddress& address);
  // The map read: one at a time, on its own coroutine (detached, holding
  // `self`), each node's read bounded by map_read_budget, not by a caller.
  bool refresh_due() const noexcept;
  void start_refresh() noexcept;
  asio::awaitable<void> refresh(std::shared_ptr<AsyncCluster> self);
  asio::awaitable<std::vector<SlotOwner>> read_map(const NodeAddress& from);
  void on_moved(const Node& node, std::string_view text) noexcept;
  // `node` failed a request or was silent until its deadline: the map may
  // be stale, and the next read asks `node` last (map_candidates).
  void suspect(const Node& node) noexcept;

  asio::any_io_executor executor_;
  ConnectionOptions options_;
  std::chrono::milliseconds reconnect_delay_;
  std::string subscriber_id_;  // the same on every master: queue entries survive slot moves
  std::vector<std::shared_ptr<Node>> slots_;  // kClusterSlots entries
  std::map<std::string, std::shared_ptr<Node>> nodes_;  // by "host:port"
  bool stale_ = true;
  bool refreshing_ = false;
  std::exception_ptr refresh_failure_;  // of the last read, if it failed
  std::set<std::string> suspects_;      // map_candidates
  bool closed_ = false;
  Clock::time_point last_refresh_{};
  std::uint64_t refreshes_ = 0;
};

}  // namespace lockon::detail
