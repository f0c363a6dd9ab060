// Which Redis node serves a key: the topology layer of the client.
//
// A Node is one server this process talks to: its bounded connection pool
// and, once a lock waits there, its pub/sub subscriber. A Topology maps a
// lock key to the Node serving it now:
//   - standalone: always the one node;
//   - Sentinel: the current master, found through the sentinels; a switch
//     retires the old master's Node (pool *and* subscriber) and makes a new
//     one (sentinel_topology.*);
//   - Cluster: the master owning the key's hash slot (cluster_topology.*).
//
// Nodes are handed out as shared_ptr: a caller keeps the Node it routed to
// alive for the whole exchange even if the topology retires it meanwhile
// (a failover, a slot move), so a pool lease can never outlive its pool.
// Declare the Node before the lease: `auto node = ...; auto c = node->pool().borrow();`.
//
// Feedback: callers report what tells the topology its map may be stale (an
// error reply such as MOVED/ASK/READONLY, a connection failure). The
// topology decides whether and when to re-resolve; reporting never blocks on
// the network. Retrying the caller's request is the caller's business (see
// errors.hpp: only what certainly did not run is retried by the client).
#pragma once

#include <chrono>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "client/pool.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// How a Node's subscriber listens for wake-ups.
struct PubSubSettings {
  /// SSUBSCRIBE (Redis Cluster: shard channels, counted on the slot's own
  /// master) instead of SUBSCRIBE.
  bool sharded = false;
  /// The subscriber's id; empty: a random one. A cluster gives every Node
  /// the same id, so a queue entry stays valid when its slot moves.
  std::string subscriber_id{};
};

class Pipeline;

/// A service a higher layer runs on each Node, started on first use and
/// retired with the Node (a Sentinel switch retires pool and service
/// together): the lock layer's wake-up subscriber (lock/subscriber.hpp).
/// The client layer knows one thing of it, its subscriber id: the name
/// under which this process's queue entries on that node are addressed.
class NodeService {
 public:
  virtual ~NodeService() = default;
  virtual const std::string& id() const noexcept = 0;
};

/// Makes a Node's service from the node's options and pub/sub settings.
using NodeServiceFactory = std::unique_ptr<NodeService> (*)(const ConnectionOptions&, const PubSubSettings&);

class Node {
 public:
  /// `options` must describe one server (Deployment::standalone).
  Node(ConnectionOptions options, PoolOptions limits, PubSubSettings pubsub = {});
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  Pool& pool() noexcept { return pool_; }
  /// The shared auto-pipelined connection (pipeline.hpp); null unless
  /// options().auto_pipeline.
  Pipeline* pipeline() noexcept { return pipeline_.get(); }
  /// The node's service, made by `make` on first use. Invariant: one
  /// factory serves every caller in the process (lock/subscriber.cpp's
  /// subscriber_of()), so the service is of the type that factory makes.
  NodeService& service(NodeServiceFactory make);
  /// Its subscriber id if it has been started (no thread of this process
  /// has waited on this node otherwise), else empty. Starts nothing.
  std::string subscriber_id_if_started();
  const ConnectionOptions& options() const noexcept { return pool_.options(); }
  /// "host:port" of this node (no credentials).
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  Pool pool_;
  std::unique_ptr<Pipeline> pipeline_;
  std::string endpoint_;
  PubSubSettings pubsub_;
  std::mutex service_mutex_;
  std::unique_ptr<NodeService> service_;
};

class Topology {
 public:
  virtual ~Topology() = default;

  /// The node serving `key` now. May block to resolve the map the first
  /// time (bounded by the connect timeout); throws ConnectError if no node
  /// can be found.
  virtual std::shared_ptr<Node> node_for(std::string_view key) = 0;
  /// As node_for(key), but a resolution that `until` (a caller's deadline)
  /// cuts short returns null: nothing was sent (Sentinel's resolution, a
  /// Cluster's map read while the key's slot has no owner; both go on for
  /// the other callers).
  virtual std::shared_ptr<Node> node_for(std::string_view key, std::chrono::steady_clock::time_point until) {
    static_cast<void>(until);
    return node_for(key);
  }
  /// A node for commands without a key (PING, Client::command).
  virtual std::shared_ptr<Node> any_node() = 0;
  /// Every node that holds keys now (Client::masters): by default the one
  /// any_node() names; a Cluster's masters after a fresh map read.
  virtual std::vector<std::shared_ptr<Node>> masters() { return {any_node()}; }
  /// The node at `address` (a Cluster ASK redirection's target), created
  /// if unknown; null where redirections do not exist.
  virtual std::shared_ptr<Node> node_at(const NodeAddress& address) {
    static_cast<void>(address);
    return nullptr;
  }

  /// `node` answered a request with error reply `text` (e.g. "MOVED 3999
  /// 127.0.0.1:7001", "READONLY ..."). Never blocks on the network.
  virtual void report_error_reply(const Node& node, std::string_view text) noexcept {
    static_cast<void>(node);
    static_cast<void>(text);
  }
  /// A request to `node` failed with an I/O error (connection lost/refused).
  virtual void report_io_failure(const Node& node) noexcept { static_cast<void>(node); }
};

/// One server: every key maps to the same node.
class StandaloneTopology final : public Topology {
 public:
  StandaloneTopology(const ConnectionOptions& options, PoolOptions limits)
      : node_(std::make_shared<Node>(options, limits)) {}
  using Topology::node_for;
  std::shared_ptr<Node> node_for(std::string_view) override { return node_; }
  std::shared_ptr<Node> any_node() override { return node_; }

 private:
  std::shared_ptr<Node> node_;
};

/// The topology `options.deployment` asks for.
std::unique_ptr<Topology> make_topology(const ConnectionOptions& options, PoolOptions limits);

}  // namespace lockon::detail
