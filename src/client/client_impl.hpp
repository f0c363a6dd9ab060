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
#include "lock/subscriber.hpp"

namespace lockon::detail {

class ClientImpl {
 public:
  ClientImpl(ConnectionOptions options, PoolOptions pool);
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  /// The connections of this process image: in a forked child, a fresh pool
  /// (the parent's sockets are the parent's; see fork.hpp).
  Pool& pool() { return state().pool; }
  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }

  /// The process's pub/sub connection to this server, started on first use
  /// (in a forked child: its own).
  Subscriber& subscriber();

  // The topology seam: the lock layer asks for the pool and the subscriber
  // of the node that serves a lock key. One server: always the same. Under
  // Sentinel: the current master's (moved on a switch). Under Cluster: the
  // master owning the key's slot.
  Pool& pool_for(std::string_view key) { static_cast<void>(key); return pool(); }
  Subscriber& subscriber_for(std::string_view key) { static_cast<void>(key); return subscriber(); }

 private:
  struct State {
    State(const ConnectionOptions& options, PoolOptions limits) : pool(options, limits) {}
    Pool pool;
    std::mutex subscriber_mutex;
    std::unique_ptr<Subscriber> subscriber;
  };

  State& state() {
    return state_.get([this] { return std::make_unique<State>(options_, limits_); });
  }

  ConnectionOptions options_;
  PoolOptions limits_;
  std::string endpoint_;
  ForkLocal<State> state_;
};

/// Converts a hiredis reply to a value; error replies are thrown (mapped).
Reply to_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation);

/// Checks options that every connection needs (port range, db, timeouts).
void validate(const ConnectionOptions& options);

}  // namespace lockon::detail
