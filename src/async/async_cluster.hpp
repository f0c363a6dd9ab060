// The async front on a Redis Cluster: the slot map, one AsyncConnection per
// master (made lazily) and one sharded AsyncSubscriber per master (made on
// the first wait there), and the routed exchange — the coroutine
// counterpart of ClusterTopology + routed_call (client/cluster_topology.hpp,
// client/routed.hpp), with the same rules:
//
// - the map is read with CLUSTER SHARDS (CLUSTER SLOTS before Redis 7; the
//   parsing is shared: client/cluster_map.hpp) from a known master or a
//   seed, on first use, and again when stale (after MOVED, CLUSTERDOWN or a
//   connection failure): one refresh at a time, at most every
//   kRefreshInterval; the others route with the map they have;
// - MOVED fixes its slot at once and the request is resent to the owner;
//   ASK resends once to the named node, preceded by ASKING (in the same
//   write); TRYAGAIN/CLUSTERDOWN are resent after a back-off doubling from
//   1 ms to 100 ms; a ConnectError (nothing sent) is retried likewise. Those
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
#include <map>
#include <memory>
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
  /// The sharded subscriber of the master serving `key` now.
  asio::awaitable<std::shared_ptr<AsyncSubscriber>> subscriber_for(std::string_view key, Clock::time_point until);

  /// Closes every connection and subscriber (waiters poll).
  void close() noexcept;

  /// How many times the map was read (tests).
  std::uint64_t refreshes() const noexcept { return refreshes_; }

 private:
  asio::awaitable<std::shared_ptr<Node>> node_for_slot(int slot, Clock::time_point until);
  std::shared_ptr<Node> node_at(const NodeAddress& address);
  asio::awaitable<void> refresh(Clock::time_point until);
  asio::awaitable<std::vector<SlotOwner>> read_map(const NodeAddress& from, Clock::time_point until);
  void on_moved(const Node& node, std::string_view text) noexcept;

  asio::any_io_executor executor_;
  ConnectionOptions options_;
  std::chrono::milliseconds reconnect_delay_;
  std::string subscriber_id_;  // the same on every master: queue entries survive slot moves
  std::vector<std::shared_ptr<Node>> slots_;  // kClusterSlots entries
  std::map<std::string, std::shared_ptr<Node>> nodes_;  // by "host:port"
  bool stale_ = true;
  bool refreshing_ = false;
  bool closed_ = false;
  Clock::time_point last_refresh_{};
  std::uint64_t refreshes_ = 0;
};

}  // namespace lockon::detail
