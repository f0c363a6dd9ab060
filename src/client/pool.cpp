#include "client/pool.hpp"

#include <chrono>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {

Pool::Pool(ConnectionOptions options, PoolOptions limits) : options_(std::move(options)), limits_(limits) {
  if (limits_.size == 0) throw ConfigError("pool size must be at least 1");
  if (limits_.wait_timeout.count() < 0) throw ConfigError("pool wait timeout must not be negative");
  if (limits_.wait_timeout > kMaxTimeout)
    throw ConfigError("pool wait timeout over " + std::to_string(kMaxTimeout.count()) + " ms");
  idle_.reserve(limits_.size);
}

Pool::Lease Pool::borrow() {
  std::unique_lock lock(mutex_);
  wait_available(lock, std::chrono::steady_clock::time_point::max());
  return take(lock);
}

std::optional<Pool::Lease> Pool::borrow_by(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!wait_available(lock, deadline)) return std::nullopt;
  return take(lock);
}

bool Pool::wait_available(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline) {
  auto available = [this] { return !idle_.empty() || opened_ < limits_.size; };
  if (available()) return true;
  const auto timeout_at = std::chrono::steady_clock::now() + limits_.wait_timeout;
  const bool deadline_first = deadline < timeout_at;
  const bool got = limits_.wait_timeout.count() > 0 && freed_.wait_until(lock, deadline_first ? deadline : timeout_at, available);
  if (got) return true;
  if (deadline_first && limits_.wait_timeout.count() > 0) return false;
  throw PoolTimeoutError("borrow connection for " + options_.endpoint() + ": all " + std::to_string(limits_.size) +
                         " pooled connections stayed busy for " + std::to_string(limits_.wait_timeout.count()) +
                         " ms");
}

Pool::Lease Pool::take(std::unique_lock<std::mutex>& lock) {
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
