// AsyncLock's port of the core (core/fast_path.hpp, core/wait_attempt.hpp,
// core/release.hpp):
// each step an asio::awaitable on the async client's command connection.
#pragma once

#include <asio/awaitable.hpp>

#include <span>
#include <string>
#include <string_view>

#include "async/async_lock_impl.hpp"
#include "core/fast_path.hpp"
#include "core/release.hpp"
#include "protocol/lock_scripts.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {

namespace async_port {
inline core::Sent::Ended sent_ended(AsyncConnection::Ended ended) noexcept {
  switch (ended) {
    case AsyncConnection::Ended::replied:
      return core::Sent::Ended::replied;
    case AsyncConnection::Ended::deadline:
      return core::Sent::Ended::deadline;
    case AsyncConnection::Ended::cancelled:
      break;
  }
  return core::Sent::Ended::cancelled;
}
}  // namespace async_port

class AsyncLockImpl::Port {
 public:
  template <class T>
  using Task = asio::awaitable<T>;

  explicit Port(AsyncLockImpl& lock) noexcept : lock_(lock) {}

  // Error replies come back as replies (a NOSCRIPT must, to be resent
  // with the body).
  asio::awaitable<core::Sent> send(std::span<const std::span<const std::string_view>> commands,
                                   Clock::time_point until) {
    AsyncConnection::Outcome outcome = co_await lock_.client_->pipeline(commands, "acquire lock", until);
    core::Sent sent;
    sent.ended = async_port::sent_ended(outcome.ended);
    sent.replies = std::move(outcome.replies);
    co_return sent;
  }
  void abandon(bool outcome_unknown) { lock_.client_->abandon(lock_.keys_, lock_.orphan_entry(), outcome_unknown); }
  void abandon_token(std::string_view token) {
    lock_.client_->abandon(lock_.keys_, queue_entry(kNotQueued, kNotQueued, lock_.ttl_text_,
                                                    exclusive_kind(lock_.options_.fencing), token));
  }
  asio::awaitable<void> drop_record() noexcept {
    if (!lock_.record_.empty()) co_await lock_.drop_record();
  }
  asio::awaitable<void> replace_stale_record(Clock::time_point until) noexcept {
    co_await lock_.replace_stale_record(until);
  }
  asio::awaitable<core::Sent> run_wait_attempt(std::span<const std::string_view> argv, Clock::time_point deadline) {
    AsyncClientImpl::Answer answer = co_await lock_.client_->script(
        scripts::wait_attempt(lock_.client_->sharded()), lock_.keys(), argv, "acquire lock", deadline);
    core::Sent sent;
    sent.ended = async_port::sent_ended(answer.ended);
    if (answer.ended == AsyncConnection::Ended::replied) sent.replies.push_back(std::move(answer.reply));
    co_return sent;
  }
  asio::awaitable<core::Sent> run_release(std::span<const std::string_view> argv, Clock::time_point until) {
    AsyncClientImpl::Answer answer = co_await lock_.client_->script(scripts::release(lock_.client_->sharded()),
                                                                    lock_.keys(), argv, "release lock", until);
    core::Sent sent;
    sent.ended = async_port::sent_ended(answer.ended);
    if (answer.ended == AsyncConnection::Ended::replied) sent.replies.push_back(std::move(answer.reply));
    co_return sent;
  }
  void warn_publish_denied() const { detail::warn_publish_denied(*lock_.client_); }
  bool sharded() const noexcept { return lock_.client_->sharded(); }
  const std::string& endpoint() const noexcept { return lock_.client_->endpoint(); }
  [[noreturn]] void throw_token_in_use() const { lock_.throw_token_in_use(); }

 private:
  AsyncLockImpl& lock_;
};

}  // namespace lockon::detail
