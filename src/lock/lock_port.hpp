// The blocking Lock's port of the core (core/fast_path.hpp,
// core/wait_attempt.hpp, core/release.hpp): every step a plain blocking call through
// LockCalls, so each core coroutine (InlineTask) is over when the call that
// made it returns.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/inline_task.hpp"
#include "core/fast_path.hpp"
#include "core/release.hpp"
#include "lock/lock_impl.hpp"

namespace lockon {

class Lock::Impl::Port {
 public:
  template <class T>
  using Task = detail::InlineTask<T>;

  explicit Port(Impl& lock) noexcept : lock_(lock) {}

  // Error replies come back as replies (a NOSCRIPT must, to be resent with
  // the body); a write ending in WAIT is held back up to WAIT's timeout.
  Task<detail::core::Sent> send(std::span<const std::span<const std::string_view>> commands, Clock::time_point until) {
    detail::core::Sent sent;
    sent.replies = lock_.calls_.pipeline_until(commands, "acquire lock", until, lock_.replica_wait());
    if (sent.replies.empty()) sent.ended = detail::core::Sent::Ended::deadline;
    co_return sent;
  }
  void abandon(bool outcome_unknown) { lock_.calls_.abandon(lock_.orphan_entry(lock_.token_), outcome_unknown); }
  void abandon_token(std::string_view token) { lock_.abandon_token(std::string(token)); }
  Task<void> drop_record() noexcept {
    lock_.drop_record();
    co_return;
  }
  Task<void> replace_stale_record(Clock::time_point until) noexcept {
    lock_.replace_stale_record(until);
    co_return;
  }
  Task<detail::core::Sent> run_wait_attempt(std::span<const std::string_view> argv, Clock::time_point deadline) {
    detail::core::Sent sent;
    ReplyPtr reply = lock_.calls_.run_lock_script_until(detail::scripts::wait_attempt(lock_.calls_.sharded()), argv,
                                                        "acquire lock", deadline);
    if (reply)
      sent.replies.push_back(std::move(reply));
    else
      sent.ended = detail::core::Sent::Ended::deadline;
    co_return sent;
  }
  Task<detail::core::Sent> run_release(std::span<const std::string_view> argv, Clock::time_point until) {
    detail::core::Sent sent;
    ReplyPtr reply =
        lock_.calls_.run_lock_script_until(detail::scripts::release(lock_.calls_.sharded()), argv, "release lock", until);
    if (reply)
      sent.replies.push_back(std::move(reply));
    else
      sent.ended = detail::core::Sent::Ended::deadline;
    co_return sent;
  }
  void warn_publish_denied() const { detail::warn_publish_denied(*lock_.client_.impl()); }
  bool sharded() const noexcept { return lock_.calls_.sharded(); }
  const std::string& endpoint() const noexcept { return lock_.client_.impl()->endpoint(); }
  [[noreturn]] void throw_token_in_use() const { lock_.throw_token_in_use(); }

 private:
  Impl& lock_;
};

}  // namespace lockon
