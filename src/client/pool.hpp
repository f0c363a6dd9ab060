// A bounded, thread-safe pool of Connections with RAII borrowing.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <optional>
#include <mutex>
#include <vector>

#include "client/connection.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class Pool {
 public:
  /// An exclusively borrowed connection; returns itself to the pool, marked
  /// broken (it reconnects on its next use) if it still owes replies.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), connection_(std::move(other.connection_)) {
      other.pool_ = nullptr;
    }
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ != nullptr && connection_) pool_->give_back(std::move(connection_));
    }
    Connection& operator*() const noexcept { return *connection_; }
    Connection* operator->() const noexcept { return connection_.get(); }

   private:
    friend class Pool;
    Lease(Pool* pool, std::unique_ptr<Connection> connection) noexcept
        : pool_(pool), connection_(std::move(connection)) {}
    Pool* pool_;
    std::unique_ptr<Connection> connection_;
  };

  /// Throws ConfigError if `limits.size` is 0.
  Pool(ConnectionOptions options, PoolOptions limits);

  /// Borrows a connection (not yet connected if new: Connection::command
  /// connects lazily). Blocks up to the pool's wait timeout, then throws
  /// PoolTimeoutError naming the endpoint.
  Lease borrow();
  /// As borrow(), but waits at most until `deadline` when that comes before
  /// the pool's wait timeout: nullopt if it passed first.
  std::optional<Lease> borrow_by(std::chrono::steady_clock::time_point deadline);

  const ConnectionOptions& options() const noexcept { return options_; }
  const PoolOptions& limits() const noexcept { return limits_; }

 private:
  void give_back(std::unique_ptr<Connection> connection) noexcept;
  // Waits for a connection until `deadline` or the wait timeout; false if
  // the deadline passed first. Throws PoolTimeoutError at the wait timeout.
  bool wait_available(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point deadline);
  Lease take(std::unique_lock<std::mutex>& lock);

  ConnectionOptions options_;
  PoolOptions limits_;
  std::mutex mutex_;
  std::condition_variable freed_;
  // LIFO: the most recently used connection is the likeliest to be warm.
  std::vector<std::unique_ptr<Connection>> idle_;
  std::size_t opened_ = 0;
};

}  // namespace lockon::detail
