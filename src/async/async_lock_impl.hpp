// AsyncLock's state and algorithm: the synchronous Lock's (src/lock/lock.cpp)
// on coroutines, with the same keys, scripts and safety rules:
// - fast path: SET NX PX GET (fenced: the fenced_acquire script, every fence
//   max(last + 1, the server's clock)), retried once with the same random
//   token after a lost reply;
// - waiting: subscribe to the wake channel before queueing (wait_attempt),
//   then sleep until handed the key (message), the holder's pttl runs out,
//   or wait_poll_interval passes;
// - a lease counts from a send time preceding its grant; a grant with less
//   than half a lease provable is confirmed by a renew round trip;
// - an attempt with an unknown outcome (deadline, cancellation, I/O error)
//   runs the cancel-wait script for its entry: inline when the caller
//   gives up (so a cancelled waiter has left the queue when its operation
//   completes), in the background (AsyncClientImpl::abandon) on failure.
#pragma once

#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>
#include <asio/system_error.hpp>
#include <asio/this_coro.hpp>

#include <array>
#include <chrono>
#include <exception>
#include <memory>
#include <span>
#include <string>

#include "async/async_client_impl.hpp"
#include "common/grace.hpp"
#include "core/attempt.hpp"
#include "protocol/lease.hpp"
#include "lockon/async.hpp"

namespace lockon::detail {

// Called (co_await) before any awaitable once the caller may have been
// cancelled: Asio throws operation_aborted from every co_await of a
// cancelled coroutine, and the clean-up must still run.
inline auto uncancellable() {
  return asio::this_coro::reset_cancellation_state([](asio::cancellation_type) {
    return asio::cancellation_type::none;
  });
}

/// How long leaving the queue may take before it is left to the background
/// clean-up (common/grace.hpp).
inline constexpr std::chrono::milliseconds kLeaveGrace = kCancelGrace;

inline bool cancellation_requested(const asio::cancellation_state& state) noexcept {
  return state.cancelled() != asio::cancellation_type::none;
}

[[noreturn]] inline void throw_cancelled() { throw asio::system_error(asio::error::operation_aborted); }

/// Now + the socket timeout (5 s when unbounded): for clean-ups that must
/// not wait forever.
inline std::chrono::steady_clock::time_point bounded_by_socket_timeout(const ConnectionOptions& options) {
  const auto timeout = options.socket_timeout.count() > 0 ? options.socket_timeout : std::chrono::milliseconds(5000);
  return std::chrono::steady_clock::now() + timeout;
}

/// Warns once per server that wake-ups cannot be published (ACL).
void warn_publish_denied(const AsyncClientImpl& client);

class AsyncLockImpl : public std::enable_shared_from_this<AsyncLockImpl> {
 public:
  using Clock = std::chrono::steady_clock;

  AsyncLockImpl(std::shared_ptr<AsyncClientImpl> client, std::string name, LockOptions options);

  /// deadline == min(): one attempt; max(): forever. Throws as documented
  /// in async.hpp; asio::system_error(operation_aborted) when cancelled.
  asio::awaitable<bool> acquire(Clock::time_point deadline);
  asio::awaitable<void> release() noexcept;
  asio::awaitable<void> extend(std::chrono::milliseconds additional, bool replace_ttl);
  void release_detached() noexcept;
  /// The AsyncLock object is gone: an acquisition still running releases
  /// what it wins at once (nobody could release it later).
  void orphan() noexcept { orphaned_ = true; }

  const std::shared_ptr<AsyncClientImpl>& client() const noexcept { return client_; }
  const std::string& name() const noexcept { return keys_[0]; }
  const LockOptions& options() const noexcept { return options_; }
  bool held() const noexcept { return held_; }
  std::uint64_t fence() const noexcept { return fence_; }
  const std::shared_ptr<LeaseSignal>& lease() const noexcept { return lease_; }
  std::exception_ptr last_unlock_error() const noexcept { return last_unlock_error_; }

 private:
  using Attempt = core::Attempt;
  class Port;  // the Asio port of the core (async/async_lock_port.hpp)
  struct Renewal;

  std::array<std::string_view, kLockScriptKeys> keys() const noexcept { return key_views(keys_); }
  /// The keys a renewal or extension keeps alive: the lock, and its holder
  /// record (protocol/holder_record.hpp) when this acquisition wrote one, and with
  /// `for_process` both and the record naming the holder's process
  /// ({K}:hs; scripts::renew(), extend(): kept while it names that process).
  std::span<const std::string_view> lease_keys(std::array<std::string_view, 3>& storage, bool with_record,
                                               bool for_process = false) const noexcept {
    storage = {keys_[0], keys_[4], keys_[6]};
    return std::span<const std::string_view>(storage).first(for_process ? 3 : with_record ? 2 : 1);
  }
  /// Deletes the holder record if it is still this attempt's (an attempt
  /// that took nothing). Best effort, within kLeaveGrace.
  asio::awaitable<void> drop_record() noexcept;
  asio::awaitable<void> replace_stale_record(Clock::time_point until) noexcept;
  std::string orphan_entry() const;
  bool random_token() const noexcept { return !options_.token.has_value(); }
  [[noreturn]] void throw_token_in_use() const;

  asio::awaitable<bool> acquire_inner(Clock::time_point deadline);
  bool acks_required() const noexcept { return options_.replica_acks.replicas > 0; }
  /// With replica_acks: makes the replicas acknowledge the grant just
  /// confirmed (K holds token_), or throws (ReplicationError, LockNotOwned,
  /// an IoError) leaving K to the caller's failure path.
  asio::awaitable<void> replicate_grant();
  asio::awaitable<Attempt> fast_attempt(Clock::time_point deadline);
  asio::awaitable<Attempt> wait_attempt(const std::string& entry, bool enqueue, Clock::time_point deadline);
  asio::awaitable<bool> wait_for_turn(Clock::time_point deadline);
  asio::awaitable<bool> confirm_lease(Attempt& attempt, Clock::time_point until);
  /// Runs cancel-wait for `entry` now (not cancellable), bounded by the
  /// socket timeout; hands it to the background if that fails.
  asio::awaitable<void> leave(const std::string& entry) noexcept;
  void on_acquired(const Attempt& attempt);
  void stop_renewal() noexcept;
  static asio::awaitable<void> renew_loop(std::shared_ptr<AsyncLockImpl> self, std::shared_ptr<Renewal> renewal);

  std::shared_ptr<AsyncClientImpl> client_;
  LockScriptKeys keys_;  // lock_script_keys(): [4] is the holder record (`lockon status`)
  LockOptions options_;
  std::string ttl_text_;
  bool busy_ = false;  // an acquisition/extension is running
  bool orphaned_ = false;
  bool held_ = false;
  std::string token_;   // current acquisition's (never logged)
  std::string record_;  // its holder record; empty: none (holder_record = false)
  std::uint64_t fence_ = 0;
  std::shared_ptr<LeaseSignal> lease_;
  std::shared_ptr<Renewal> renewal_;
  std::exception_ptr last_unlock_error_;
};

}  // namespace lockon::detail
