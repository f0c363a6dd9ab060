// Redis Cluster: which master serves a key's hash slot.
//
// The slot map comes from CLUSTER SHARDS (CLUSTER SLOTS on servers without
// it) asked of any reachable node: first the masters already known, then the
// seeds of the URL. Every master gets a Node (its own pool and, once a lock
// waits there, its own subscriber on sharded pub/sub) built from a copy of
// the options with that master's host and port.
//
// Staleness: a MOVED reply fixes its one slot at once (the redirected caller
// retries right away) and marks the map stale; so does a connection failure.
// The next caller that finds the map stale re-reads it, one at a time and at
// most every kRefreshInterval; the others keep routing with the map they
// have (a wrong guess only costs another MOVED). There is no background
// thread: nothing to stop at fork, and an idle client costs nothing.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "client/cluster_map.hpp"
#include "client/slots.hpp"
#include "client/topology.hpp"

namespace lockon::detail {

class ClusterTopology final : public Topology {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kRefreshInterval = std::chrono::milliseconds(100);

  ClusterTopology(const ConnectionOptions& options, PoolOptions limits);

  using Topology::node_for;
  std::shared_ptr<Node> node_for(std::string_view key) override;
  std::shared_ptr<Node> any_node() override;
  std::shared_ptr<Node> node_at(const NodeAddress& address) override;
  void report_error_reply(const Node& node, std::string_view text) noexcept override;
  void report_io_failure(const Node& node) noexcept override;

  /// The node serving `slot`, refreshing the map first if it is stale or
  /// has no owner for it.
  std::shared_ptr<Node> node_for_slot(int slot);
  /// Re-reads the slot map now (bounded by the connect and socket timeouts
  /// per node asked). Throws ConnectError if no node answers usefully.
  void refresh();
  /// How many times the map was read (tests).
  std::uint64_t refreshes() const noexcept { return refreshes_.load(); }

 private:
  using Owner = SlotOwner;  // client/cluster_map.hpp
  std::vector<Owner> read_map(const NodeAddress& from) const;
  std::shared_ptr<Node> node_locked(const NodeAddress& address);  // caller holds map_mutex_ exclusively
  void maybe_refresh() noexcept;
  void refresh_locked();  // caller holds refresh_mutex_

  ConnectionOptions options_;
  PoolOptions limits_;
  PubSubSettings pubsub_;
  mutable std::shared_mutex map_mutex_;
  std::array<std::shared_ptr<Node>, kClusterSlots> slots_{};
  std::map<std::string, std::shared_ptr<Node>> nodes_;  // by "host:port"
  std::mutex refresh_mutex_;                            // one refresh at a time
  std::atomic<bool> stale_{true};
  std::atomic<Clock::rep> last_refresh_{0};
  std::atomic<std::uint64_t> refreshes_{0};
};

}  // namespace lockon::detail
