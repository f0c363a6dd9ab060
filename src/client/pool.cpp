#include "client/pool.hpp"

#include <chrono>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {

Pool::Pool(ConnectionOptions options, PoolOptions limits) : options_(std::move(options)), limits_(limits) {
  if (limits_.size == 0) throw ConfigError("pool size must be at least 1");
  if (limits_.wait_timeout.count() < 0) throw ConfigError("pool wait timeout must not be negative");
  idle_.reserve(limits_.size);
}

Pool::Lease Pool::borrow() {
  std::unique_lock lock(mutex_);
  auto available = [this] { return !idle_.empty() || opened_ < limits_.size; };
  if (!available()) {
    const bool got = limits_.wait_timeout.count() > 0 && freed_.wait_for(lock, limits_.wait_timeout, available);
    if (!got)
      throw PoolTimeoutError("borrow connection for " + options_.endpoint() + ": all " +
                             std::to_string(limits_.size) + " pooled connections stayed busy for " +
                             std::to_string(limits_.wait_timeout.count()) + " ms");
  }
  if (!idle_.empty()) {
    auto connection = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(connection));
  }
  ++opened_;
  lock.unlock();
  try {
    return Lease(this, std::make_unique<Connection>(options_));
  } catch (...) {
    lock.lock();
    --opened_;
    freed_.notify_one();
    throw;
  }
}

void Pool::give_back(std::unique_ptr<Connection> connection) noexcept {
  // A caller that threw between sending and reading (an error reply checked
  // mid-pipeline, a timeout, an exception of its own) left replies in the
  // stream: the next borrower would read them as its own. Reconnect instead.
  if (connection->owes_replies()) connection->mark_broken();
  {
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(connection));
  }
  freed_.notify_one();
}

}  // namespace lockon::detail
