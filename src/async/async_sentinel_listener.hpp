// The async front's listener for failover news (client/sentinel_events.hpp):
// one subscription per sentinel of the URL, each renewed kListenRetry after
// it breaks, for as long as the listener is open; the counterpart of the
// blocking front's listener threads (client/sentinel_topology.cpp).
//
// News is handed to `on_news` on the executor. When the failover's leader
// names the replica it is promoting, the listener probes that replica's
// ROLE every kCandidateProbeEvery (at most kCandidateWatchFor) and reports
// it as news once it says master; a newer candidate, or news naming the new
// master, ends the probing.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "async/async_connection.hpp"
#include "client/sentinel_events.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

class AsyncSentinelListener : public std::enable_shared_from_this<AsyncSentinelListener> {
 public:
  using OnNews = std::function<void(std::size_t sentinel, const SentinelNews& news)>;
  static constexpr auto kListenRetry = std::chrono::milliseconds(250);

  /// Contacts nothing until start(). Everything runs on `executor`.
  AsyncSentinelListener(asio::any_io_executor executor, ConnectionOptions options, OnNews on_news);

  /// Subscribes on every sentinel (once; later calls do nothing).
  void start();
  /// Ends every subscription and probe; no news is reported after it.
  void close() noexcept;

 private:
  static asio::awaitable<void> listen(std::weak_ptr<AsyncSentinelListener> weak, std::size_t sentinel);
  static asio::awaitable<void> watch_candidate(std::weak_ptr<AsyncSentinelListener> weak, std::size_t sentinel,
                                               NodeAddress candidate, std::uint64_t watch);
  void on_message(std::size_t sentinel, const redisReply& message);

  asio::any_io_executor executor_;
  ConnectionOptions options_;
  OnNews on_news_;
  bool started_ = false;
  bool closed_ = false;
  std::vector<std::shared_ptr<AsyncConnection>> subscriptions_;  // by sentinel
  std::uint64_t candidate_watch_ = 0;  // the current watch_candidate(); bumped to end it
};

}  // namespace lockon::detail
