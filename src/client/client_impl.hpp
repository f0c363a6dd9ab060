// The shared state behind a lockon::Client handle.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/fork.hpp"
#include "client/hiredis_handles.hpp"
#include "lockon/client.hpp"
#include "client/pool.hpp"
#include "client/topology.hpp"

namespace lockon::detail {

class ClientImpl {
 public:
  ClientImpl(ConnectionOptions options, PoolOptions pool);
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  // The topology seam: the lock layer asks for the node serving a lock key
  // (see topology.hpp) and keeps the shared_ptr for the whole exchange. In a
  // forked child, a fresh topology: the parent's sockets are the parent's
  // (see fork.hpp).
  std::shared_ptr<Node> node_for(std::string_view key) { return topology().node_for(key); }
  /// Null when `until` passed while the node was being found (Sentinel).
  std::shared_ptr<Node> node_for(std::string_view key, std::chrono::steady_clock::time_point until) {
    return topology().node_for(key, until);
  }
  std::shared_ptr<Node> any_node() { return topology().any_node(); }
  Topology& topology() { return state_.get([this] { return make_topology(options_, limits_); }); }

  /// Standalone shorthand (tests, benchmarks, one-server paths): the pool
  /// of any_node(). Only valid while the topology keeps that node, i.e.
  /// always for one server.
  Pool& pool() { return any_node()->pool(); }

  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  ConnectionOptions options_;
  PoolOptions limits_;
  std::string endpoint_;
  ForkLocal<Topology> state_;
};

/// Converts a hiredis reply to a value; error replies are thrown (mapped).
Reply to_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation);

/// Checks options that every connection needs (port range, db, timeouts).
void validate(const ConnectionOptions& options);

}  // namespace lockon::detail
