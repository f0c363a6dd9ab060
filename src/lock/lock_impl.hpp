// Lock::Impl, the single-instance lock's state and steps: shared by
// lock.cpp (acquisition, release, leases) and lock_wait.cpp (the waiting
// path: queueing, wake-ups, hand-overs). See lock.cpp for the design.
#pragma once

#include <optional>
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <utility>

#include "common/diagnostics.hpp"
#include "common/grace.hpp"
#include "core/attempt.hpp"
#include "client/error_map.hpp"
#include "protocol/replica_acks.hpp"
#include "protocol/holder_record.hpp"
#include "protocol/lease.hpp"
#include "lock/lock_calls.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lock/subscriber.hpp"
#include "common/token.hpp"
#include "lock/watchdog.hpp"

namespace lockon {

using detail::ReplyPtr;
using Clock = DistributedLock::Clock;

namespace detail {
/// Warns once per endpoint that wake-ups cannot be published (ACL).
void warn_publish_denied(const ClientImpl& client);
}  // namespace detail

class Lock::Impl {
  static constexpr std::chrono::milliseconds kCancelGrace = detail::kCancelGrace;

 public:
  Impl(Client client, State& state)
      : client_(std::move(client)),
        calls_(client_.impl(), state.name),
        state_(state),
        ttl_text_(state.options.no_expiry ? "0" : std::to_string(state.options.ttl.count())) {}

  using Attempt = detail::core::Attempt;
  bool acquire_until(Clock::time_point deadline);
  /// Waits for the release's reply until `until` at most (time_point::max():
  /// the routing bound); unanswered by then, the background clean-up
  /// releases K if it still holds our token.
  void release(Clock::time_point until = Clock::time_point::max());
  void extend(std::chrono::milliseconds additional, bool replace_ttl);
  void reacquire();
  bool owned();
  bool locked();
  std::optional<std::chrono::milliseconds> remaining_ttl();
  void stop_renewal() noexcept;
  void replace_stale_record(Clock::time_point until) noexcept;
  /// Without auto_renew: the watchdog watches the end the lease has now
  /// (after an extension moved it, earlier too). No-op otherwise.
  void rewatch_lease_end() noexcept;
  void abandon_wait() noexcept;

  // Internal entry points of MultiLock's single-script path
  // (src/multi/one_script.cpp, lock_adopt.cpp). Not used by Lock itself.
  const detail::LockCalls& calls() const noexcept { return calls_; }
  const LockOptions& options() const noexcept { return state_.options; }
  const std::shared_ptr<detail::ClientImpl>& client_impl() const noexcept { return client_.impl(); }
  /// Not held, no queue place kept: an acquisition may be adopted.
  bool can_adopt() noexcept {
    forget_parents_wait();
    return !state_.held_here() && !wait_;
  }
  /// Takes over an acquisition of this key made by someone else's request
  /// (sent at `sent_at`, the key set to `token` with this lock's ttl,
  /// `record` written as holder record): from here on it is exactly this
  /// Lock's (lease end, watchdog, release). False when the lease can no
  /// longer be proven (confirm_lease) — the key is then not held.
  bool adopt(const std::string& token, const std::string& record, std::uint64_t fence, Clock::time_point sent_at);
  /// Hands an attempt with `token` whose outcome is unknown to the clean-up.
  void abandon_token(const std::string& token) const noexcept { calls_.abandon(orphan_entry(token), true); }

 private:
  // A queue place: kept across timed attempts with keep_queue_place.
  struct Wait {
    // Sent before our entry was queued, so before any hand-over to it: the
    // only send time known to precede a grant that reached us by message
    // (a wake-up can arrive after later attempts, e.g. held by a partition).
    Clock::time_point queued_at;
    std::string entry;
    std::string token;
    // The node whose subscriber holds `watch`: kept alive for the wait even
    // if a failover or slot move retires it (declared before the watch, so
    // destroyed after it).
    std::shared_ptr<detail::Node> node;
    std::string waiter_id;
    std::unique_ptr<detail::Subscriber::Watch> watch;
    Attempt last;
    // watch->connection_generation() sampled before the last attempt: a
    // hand-over message is trusted only from that connection (wake_trusted).
    std::uint64_t heard_generation = 0;
    bool spun = false;  // a spin window was given (handoff_spin: one per wait)
    // An attempt with `entry` whose reply was never read may still run
    // (keep_queue_place kept the place past such a deadline): whoever ends
    // the place has the clean-up sweep again later (cancel_now).
    bool late_request = false;
    // The entry a move of ours (move_wait) whose reply never came may still
    // rename into `entry`: cancelled with the place (cancel_wait_place).
    std::string moved_from;
    std::uint64_t generation = detail::fork_generation();  // the process image that queued it
  };
  /// A queue place kept (keep_queue_place) by the parent, seen in a forked
  /// child: the parent's, not ours. Continuing from it would take the
  /// parent's hand-over (two holders); giving it up would cancel the
  /// parent's entry, or hand its lock on. Dropped without I/O, and never
  /// destroyed (its watch belongs to the parent's subscriber; common/fork.hpp).
  void forget_parents_wait() noexcept {
    if (wait_ && wait_->generation != detail::fork_generation()) (void)wait_.release();
  }

  bool random_token() const noexcept { return !state_.options.token.has_value(); }

  // How long after an acquisition that had to wait the next one goes
  // straight to the queue: below the subscriber's linger (1 s), so the
  // subscription is normally still up and queueing costs no SUBSCRIBE.
  static constexpr std::chrono::milliseconds kContendedMemory{500};

  bool queue_directly(Clock::time_point deadline) const {
    // Replica acks: the fast path pipelines WAIT with the SET; the queue's
    // grant would need an extra round trip (replicate_grant).
    if (queue_directly_until_ == Clock::time_point{} || acks_required() || deadline == Clock::time_point::min())
      return false;  // the uncontended path pays no clock read here
    const auto now = Clock::now();
    return now < queue_directly_until_ && now < deadline;
  }

  // After an acquisition through the queue: whether it waited there.
  void note_contention(bool waited) {
    queue_directly_until_ = waited ? detail::add_saturating(Clock::now(), kContendedMemory) : Clock::time_point{};
  }
  std::string orphan_entry(const std::string& token) const;
  [[noreturn]] void throw_token_in_use() const;
  class Port;  // the blocking port of the core (lock/lock_port.hpp)
  Attempt fast_attempt(Clock::time_point deadline);
  Attempt wait_attempt(const std::string& entry, bool enqueue, Clock::time_point deadline);
  bool wait_for_turn(Clock::time_point deadline);
  Attempt attempt_in_line(bool enqueue, Clock::time_point deadline);
  void follow_node(Clock::time_point until, Clock::time_point deadline);
  void follow_slot(Clock::time_point until);
  void move_wait(std::shared_ptr<detail::Node> node, Clock::time_point until, Clock::time_point deadline);
  bool wake_trusted();
  Attempt handed_attempt();
  void reset_slot();
  // `late_request`: the last attempt's reply was not read (it may still run).
  bool give_up(bool late_request);
  bool finish_wait(const Attempt& attempt);
  // Ends the queue place: wait_ dropped, its entries cancelled (sweeping
  // again later when `late_request` or the Wait says so).
  void cancel_wait_place(bool late_request) noexcept;

  bool acks_required() const noexcept { return state_.options.replica_acks.replicas > 0; }
  /// How long the server may hold back a pipeline's last reply (its WAIT).
  std::chrono::milliseconds replica_wait() const noexcept {
    return acks_required() ? state_.options.replica_acks.timeout : std::chrono::milliseconds(0);
  }
  std::span<const std::string_view> wait_args();
  void drop_record() noexcept;
  void replicate_grant();
  void require_acks(int acks);
  bool confirm_lease(Attempt& attempt, Clock::time_point until = Clock::time_point::max());
  bool on_acquired(const Attempt& attempt);
  void require_extendable(const char* what);
  void check_owned(const ReplyPtr& reply, const char* what);

  Client client_;
  detail::LockCalls calls_;
  State& state_;
  const std::string ttl_text_;
  std::string token_;
  std::string record_;  // holder record of this acquisition (empty: none)
  // The queue entry of this holding's wait when an attempt of it whose reply
  // was never read may still run (taken by hand-over at the deadline, or
  // through a kept place): that attempt, run after our release, would take
  // K with our token or queue us again, so the release leaves the clean-up
  // its sweeps for it (found by review, session 20). Empty: none.
  std::string late_entry_;
  std::unique_ptr<Wait> wait_;
  Clock::time_point queue_directly_until_{};  // see queue_directly()
  std::optional<detail::WaitCommand> wait_text_;  // WAIT's arguments (wait_args)
  std::array<std::string_view, 3> wait_command_{};
  std::shared_ptr<detail::RenewalEntry> renewal_;
};

}  // namespace lockon
