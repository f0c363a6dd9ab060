#include "async/async_sentinel_listener.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <string>

#include "async/async_sentinel.hpp"
#include "client/sentinel_topology.hpp"

namespace lockon::detail {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

AsyncSentinelListener::AsyncSentinelListener(asio::any_io_executor executor, ConnectionOptions options,
                                             OnNews on_news)
    : executor_(std::move(executor)), options_(std::move(options)), on_news_(std::move(on_news)) {}

void AsyncSentinelListener::start() {
  if (started_ || closed_) return;
  started_ = true;
  const std::size_t sentinels = sentinels_of(options_).size();
  subscriptions_.assign(sentinels, nullptr);
  for (std::size_t i = 0; i < sentinels; ++i) asio::co_spawn(executor_, listen(weak_from_this(), i), asio::detached);
}

void AsyncSentinelListener::close() noexcept {
  closed_ = true;
  ++candidate_watch_;
  for (auto& subscription : subscriptions_)
    if (subscription) subscription->close();
  subscriptions_.clear();
}

void AsyncSentinelListener::on_message(std::size_t sentinel, const redisReply& message) {
  if (closed_) return;
  const auto news = read_sentinel_news(message, options_.master_name);
  if (!news) return;
  if (news->candidate) {
    const std::uint64_t watch = ++candidate_watch_;
    asio::co_spawn(executor_, watch_candidate(weak_from_this(), sentinel, *news->candidate, watch), asio::detached);
    return;
  }
  if (news->new_master) ++candidate_watch_;  // the sentinels know: no more probing
  on_news_(sentinel, *news);
}

// One subscription to sentinel `sentinel` at a time, while the listener is open.
asio::awaitable<void> AsyncSentinelListener::listen(std::weak_ptr<AsyncSentinelListener> weak, std::size_t sentinel) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (true) {
    std::shared_ptr<AsyncConnection> connection;
    auto down = std::make_shared<bool>(false);
    {
      auto self = weak.lock();
      if (!self || self->closed_) co_return;
      const auto address = sentinels_of(self->options_).at(sentinel);
      connection = std::make_shared<AsyncConnection>(self->executor_, sentinel_options(self->options_, address),
                                                     ServerRole::sentinel);
      connection->set_push_handler([weak, sentinel](ReplyPtr reply) {
        if (auto listener = weak.lock()) listener->on_message(sentinel, *reply);
      });
      connection->set_state_handler([down](bool up, std::exception_ptr) {
        if (!up) *down = true;
      });
      self->subscriptions_.at(sentinel) = connection;
      std::string resp;
      append_resp(resp, kSentinelSubscribe);
      connection->send_unowed(resp);
    }
    while (!*down) {
      timer.expires_after(kListenRetry);
      co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      auto self = weak.lock();
      if (!self || self->closed_) {
        connection->close();
        co_return;
      }
    }
    connection->close();
    timer.expires_after(kListenRetry);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<void> AsyncSentinelListener::watch_candidate(std::weak_ptr<AsyncSentinelListener> weak,
                                                             std::size_t sentinel, NodeAddress candidate,
                                                             std::uint64_t watch) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::shared_ptr<AsyncConnection> link;
  const auto until = Clock::now() + kCandidateWatchFor;
  while (Clock::now() < until) {
    {
      auto self = weak.lock();
      if (!self || self->candidate_watch_ != watch) break;
      if (!link)
        link = std::make_shared<AsyncConnection>(self->executor_, candidate_probe_options(self->options_, candidate));
    }
    if (co_await async_says_master(*link, std::min(until, Clock::now() + std::chrono::milliseconds(250)))) {
      auto self = weak.lock();
      if (self && self->candidate_watch_ == watch) {
        ++self->candidate_watch_;
        self->on_news_(sentinel, SentinelNews{candidate, std::nullopt});
      }
      break;
    }
    if (!link->connected()) {
      link->close();
      link.reset();
    }
    timer.expires_after(kCandidateProbeEvery);
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  if (link) link->close();
}

}  // namespace lockon::detail
