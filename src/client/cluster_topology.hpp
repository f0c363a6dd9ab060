// Redis Cluster: which master serves a key's hash slot.
//
// The slot map comes from CLUSTER SHARDS (CLUSTER SLOTS on servers without
// it) asked of any reachable node: first the masters already known, then the
// seeds of the URL, those that failed lately last (map_candidates). Every
// master gets a Node (its own pool and, once a lock waits there, its own
// subscriber on sharded pub/sub) built from a copy of the options with that
// master's host and port.
//
// Staleness: a MOVED reply fixes its one slot at once (the redirected caller
// retries right away) and marks the map stale; so does a connection failure
// or a node silent until a caller's deadline. A caller that finds the map
// stale starts a re-read (one at a time, at most every kRefreshInterval)
// and goes on routing with the map it has (a wrong guess costs a MOVED, a
// dead node a retry after a back-off).
//
// Deadlines: the re-read runs on its own thread, each node's read bounded
// by map_read_budget (client/cluster_map.hpp), not by any caller: asked of
// a frozen master first, it held the caller that ran it for the socket
// timeout (a try_lock_for(200 ms) ended after 1 s: issue 33). Only a caller
// whose slot has no owner in the map (none read yet, a failover under way)
// waits for it, until its own deadline (null: nothing was sent); the
// re-read goes on for the others. The destructor waits for a running
// re-read (it uses this object): at most the candidates times their budget.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
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
  ~ClusterTopology() override;

  std::shared_ptr<Node> node_for(std::string_view key) override;
  /// Null when `until` passed while waiting for a map read (nothing sent).
  std::shared_ptr<Node> node_for(std::string_view key, Clock::time_point until) override;
  std::shared_ptr<Node> any_node() override;
  /// The masters of a fresh map read, each once, in slot order. Throws what
  /// refresh() throws, and ServerBusyError if a slot has no master.
  std::vector<std::shared_ptr<Node>> masters() override;
  std::shared_ptr<Node> node_at(const NodeAddress& address) override;
  void report_error_reply(const Node& node, std::string_view text) noexcept override;
  void report_io_failure(const Node& node) noexcept override;

  /// The node serving `slot`: starts a re-read of a stale map; waits for a
  /// map read (until `until`: null after it) only if the map has no owner
  /// for the slot. Throws ServerBusyError ("CLUSTERDOWN") if a fresh map has
  /// none, or what every node failed with if no map could be read.
  std::shared_ptr<Node> node_for_slot(int slot, Clock::time_point until = Clock::time_point::max());
  /// Re-reads the slot map now (each node asked bounded by map_read_budget)
  /// and waits for it. Throws ConnectError if no node answers usefully.
  void refresh();
  /// How many times the map was read (tests).
  std::uint64_t refreshes() const noexcept { return refreshes_.load(); }

 private:
  using Owner = SlotOwner;  // client/cluster_map.hpp
  std::vector<Owner> read_map(const NodeAddress& from) const;
  std::shared_ptr<Node> node_locked(const NodeAddress& address);  // caller holds map_mutex_ exclusively
  // The running re-read, started first if none runs and `due` says so
  // (invalid if none runs and none was started).
  std::shared_future<void> start_refresh(bool due) noexcept;
  bool refresh_due() const noexcept;
  void refresh_now();  // the re-read's thread
  void suspect(const Node& node) noexcept;

  ConnectionOptions options_;
  PoolOptions limits_;
  PubSubSettings pubsub_;
  mutable std::shared_mutex map_mutex_;
  std::array<std::shared_ptr<Node>, kClusterSlots> slots_{};
  std::map<std::string, std::shared_ptr<Node>> nodes_;  // by "host:port"
  std::mutex refresh_mutex_;                            // guards refresh_, suspects_
  std::shared_future<void> refresh_;                    // the one re-read at a time
  std::set<std::string> suspects_;                      // map_candidates
  std::atomic<bool> stale_{true};
  std::atomic<Clock::rep> last_refresh_{0};
  std::atomic<std::uint64_t> refreshes_{0};
};

}  // namespace lockon::detail
