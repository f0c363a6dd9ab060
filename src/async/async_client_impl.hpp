// The shared state behind an AsyncClient handle: the command connection,
// the pub/sub subscriber (made on first wait) and the background clean-up
// of abandoned acquisitions. Everything runs on the client's executor.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "async/async_connection.hpp"
#include "async/async_subscriber.hpp"
#include "client/script.hpp"
#include "lockon/async.hpp"

namespace lockon::detail {

class AsyncClientImpl : public std::enable_shared_from_this<AsyncClientImpl> {
 public:
  using Clock = std::chrono::steady_clock;
  using Ended = AsyncConnection::Ended;

  /// One reply, or why there is none (deadline, cancelled: outcome unknown).
  struct Answer {
    Ended ended = Ended::replied;
    ReplyPtr reply;
  };

  AsyncClientImpl(asio::any_io_executor executor, ConnectionOptions options, AsyncClientOptions limits);
  ~AsyncClientImpl();

  const asio::any_io_executor& executor() const noexcept { return executor_; }
  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }
  AsyncConnection& connection() noexcept { return *connection_; }

  /// One command; error replies are thrown (mapped), as LockCalls does.
  asio::awaitable<Answer> command(std::span<const std::string_view> args, std::string_view operation,
                                  Clock::time_point until);
  /// EVALSHA, redone as EVAL on NOSCRIPT; error replies are thrown.
  asio::awaitable<Answer> script(const Script& script, std::span<const std::string_view> keys,
                                 std::span<const std::string_view> args, std::string_view operation,
                                 Clock::time_point until);
  /// Several commands in one request; error replies are returned.
  asio::awaitable<AsyncConnection::Outcome> pipeline(std::span<const std::span<const std::string_view>> commands,
                                                     std::string_view operation, Clock::time_point until);

  /// The pub/sub connection (made on first use).
  AsyncSubscriber& subscriber();

  /// Runs the cancel-wait script for queue entry `entry` of lock `keys`
  /// (lock, queue, fence, record) in the background, retried with back-off
  /// for about half a minute, until it ran: removes the entry and passes the
  /// key on if it holds the entry's token. Never throws.
  void abandon(std::array<std::string, 4> keys, std::string entry) noexcept;

  void close() noexcept;

 private:
  asio::any_io_executor executor_;
  ConnectionOptions options_;
  AsyncClientOptions limits_;
  std::string endpoint_;
  std::shared_ptr<AsyncConnection> connection_;
  std::shared_ptr<AsyncSubscriber> subscriber_;
};

}  // namespace lockon::detail
