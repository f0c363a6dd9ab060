// The shared state behind a lockon::Client handle.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "hiredis_handles.hpp"
#include "lockon/client.hpp"
#include "pool.hpp"
#include "subscriber.hpp"

namespace lockon::detail {

class ClientImpl {
 public:
  ClientImpl(ConnectionOptions options, PoolOptions pool);

  Pool& pool() noexcept { return pool_; }
  const ConnectionOptions& options() const noexcept { return pool_.options(); }
  const std::string& endpoint() const noexcept { return endpoint_; }

  /// The process's pub/sub connection to this server, started on first use.
  Subscriber& subscriber();

 private:
  std::string endpoint_;
  Pool pool_;
  std::mutex subscriber_mutex_;
  std::unique_ptr<Subscriber> subscriber_;
};

/// Converts a hiredis reply to a value; error replies are thrown (mapped).
Reply to_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation);

/// Checks options that every connection needs (port range, db, timeouts).
void validate(const ConnectionOptions& options);

}  // namespace lockon::detail
