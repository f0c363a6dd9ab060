// AsyncLock's waiting path: queueing, waiting for the hand-over, leaving the
// queue (the algorithm of src/lock/lock_wait.cpp on coroutines; the fast
// path is in async_lock.cpp).
#include <asio/this_coro.hpp>

#include <algorithm>
#include <array>
#include <optional>

#include "common/test_hooks.hpp"
#include "async/async_lock_impl.hpp"
#include "async/async_lock_port.hpp"
#include "core/wait_attempt.hpp"
#include "common/token.hpp"
#include "protocol/lock_scripts.hpp"
#include "protocol/queue_entry.hpp"
#include "protocol/wake_proof.hpp"

namespace lockon::detail {
namespace {

using Ended = AsyncConnection::Ended;

}  // namespace

// One scripted attempt of a queued waiter (core/wait_attempt.hpp).
asio::awaitable<AsyncLockImpl::Attempt> AsyncLockImpl::wait_attempt(const std::string& entry, bool enqueue,
                                                                     Clock::time_point deadline) {
  const core::WaitRequest request{name(), entry, record_, random_token()};
  Port port(*this);
  Attempt attempt = co_await core::wait_attempt(port, request, enqueue, deadline);
  co_return attempt;
}

asio::awaitable<bool> AsyncLockImpl::wait_for_turn(Clock::time_point deadline) {
  // Held for the whole wait: a Sentinel switch replaces the client's; on a
  // Cluster it is the sharded subscriber of the master serving the key
  // (every master's has the same id, so our queue entry stays valid when
  // the slot moves: follow_slot below).
  std::shared_ptr<AsyncSubscriber> subscriber = co_await client_->subscriber_for(name(), deadline);
  // A Cluster's map read outlasted the deadline (issue 33): nothing was queued.
  if (!subscriber) co_return false;
  const std::string waiter_id = random_hex(8);
  std::string entry = queue_entry(subscriber->id(), waiter_id, ttl_text_, exclusive_kind(options_.fencing), token_);
  std::optional<AsyncSubscriber::Watch> watch;
  watch.emplace(subscriber->watch(waiter_id, wake_channel(name(), subscriber->id())));
  const auto poll = options_.wait_poll_interval;
  std::exception_ptr failure;
  bool was_cancelled = false;
  // Cluster: the key's slot moved to another master (our last attempt
  // followed a MOVED, so the map knows): listen on that master's shard
  // channel instead. A wake-up published on the old one meanwhile is not
  // lost: the key then holds our token, which the next attempt sees.
  //
  // Sentinel: the client switched masters and closed our subscriber. Our
  // entry names it, and a release on the new master counts our wake-up
  // unheard: every grant to us would be withdrawn and our entry queued
  // again at the tail. The wait moves to the new master's subscriber, the
  // entry renamed in place (scripts::move_wait; same waiter id and token: a
  // hand-over to the old entry is still ours, the next attempt takes it).
  // Not by a cancel: one retried in the background would pass K on once a
  // grant to the new entry (same token) made K ours. If the move's outcome
  // is unknown the old entry may stay queued; a release reaching it
  // publishes to nobody on the master and hands K on in the same script.
  std::uint64_t heard = 0;  // subscriber->connection_generation() before the last attempt
  const auto follow_slot = [&]() -> asio::awaitable<void> {
    if (watch->slot().handed) co_return;
    std::shared_ptr<AsyncSubscriber> now_serving;
    if (client_->sharded()) {
      now_serving = co_await client_->subscriber_for(name(), deadline);
      if (!now_serving) co_return;  // a map read outlasted the deadline: keep listening here
    } else {
      if (!detail::test_hooks::move_waits_after_failover.load(std::memory_order_relaxed)) co_return;
      now_serving = client_->subscriber_if_made();
      // Switched (the old one was closed, no new one yet): made for the current master.
      if (!now_serving) {
        try {
          now_serving = client_->subscriber();
        } catch (...) {
          co_return;  // no master known now: the next attempt reports it
        }
      }
    }
    if (now_serving == subscriber) co_return;
    watch.reset();
    subscriber = std::move(now_serving);
    watch.emplace(subscriber->watch(waiter_id, wake_channel(name(), subscriber->id())));
    heard = 0;  // nothing heard is trusted before the next attempt
    co_await subscriber->wait_subscribed(*watch, std::min(deadline, add_saturating(Clock::now(), poll)));
    if (client_->sharded()) co_return;  // every master's subscriber has the same id: the entry stays valid
    const std::string old_entry = entry;
    entry = entry_for_subscriber(old_entry, subscriber->id());
    const std::array<std::string_view, 2> args{old_entry, entry};
    static_cast<void>(co_await client_->script(scripts::move_wait(), keys(), args, "move wait", deadline));
  };
  // Whether a hand-over message proves that K holds our token
  // (protocol/wake_proof.hpp). This client closes the old master's
  // subscriber when it switches, so "the node serving the name now" is: it
  // has not switched since this wait's subscriber was made.
  const auto trusted = [&] {
    return wake_proves_grant(watch->slot().handed_generation, heard, client_->sharded(),
                             [&] { return client_->subscriber_if_made() == subscriber; });
  };
  try {
    // Subscribed before queueing: a hand-over cannot precede our ability to
    // hear of it. Bounded: a dead subscription only costs polling.
    co_await subscriber->wait_subscribed(*watch, std::min(deadline, add_saturating(Clock::now(), poll)));
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
      throw_cancelled();
    // Precedes any hand-over to our entry: the lease of a grant by message
    // counts from here.
    const auto queued_at = Clock::now();
    heard = subscriber->connection_generation(*watch);
    Attempt last = co_await wait_attempt(entry, true, deadline);
    while (true) {
      if (last.cancelled) throw_cancelled();
      bool confirmed = last.acquired;
      if (confirmed) confirmed = co_await confirm_lease(last, Clock::time_point::max());
      const bool cancelled_meanwhile = cancellation_requested(co_await asio::this_coro::cancellation_state);
      if (confirmed && cancelled_meanwhile) throw_cancelled();  // as the fast path
      if (confirmed) {
        if (acks_required()) co_await replicate_grant();
        on_acquired(last);
        co_return true;
      }
      const auto now = Clock::now();
      if (last.deadline_passed || now >= deadline) {
        // A hand-over that raced with the deadline: take it rather than bounce it.
        if (watch->slot().handed && trusted()) {  // untrusted: leave() below passes K on if ours
          Attempt handed{true, false, false, watch->slot().fence, -2, queued_at};
          const bool taken = co_await confirm_lease(handed, bounded_by_socket_timeout(client_->options()));
          const bool cancelled_at_deadline = cancellation_requested(co_await asio::this_coro::cancellation_state);
          if (taken && cancelled_at_deadline) throw_cancelled();
          if (taken) {
            if (acks_required()) co_await replicate_grant();
            on_acquired(handed);
            co_return true;
          }
        }
        break;
      }
      auto wake_at = std::min(deadline, add_saturating(now, poll));
      // A holder that crashed releases nothing: look again when its lease ends.
      if (last.pttl >= 0) wake_at = std::min(wake_at, add_saturating(last.sent_at, std::chrono::milliseconds(last.pttl + 1)));
      co_await follow_slot();
      const auto wake = co_await subscriber->wait_until(*watch, wake_at);
      if (wake == AsyncSubscriber::Wake::cancelled) throw_cancelled();
      if (wake == AsyncSubscriber::Wake::handed) {
        if (trusted()) {
          // The release set the key to our token before publishing.
          Attempt handed{true, false, false, watch->slot().fence, -2, queued_at};
          const bool taken = co_await confirm_lease(handed, Clock::time_point::max());
          // As the fast path: a cancellation during the round trip wins.
          const bool cancelled_during_handover = cancellation_requested(co_await asio::this_coro::cancellation_state);
          if (taken && cancelled_during_handover) throw_cancelled();
          if (taken) {
            if (acks_required()) co_await replicate_grant();
            on_acquired(handed);
            co_return true;
          }
        }
        // The lease ran out while we did not run, or the message is no
        // proof (trusted): the attempt decides (a real hand-over is taken
        // there: K holds our token and the record names us).
        watch->slot().handed = false;
      }
      // Past the deadline nothing more is sent (its reply could not be used):
      // the top of the loop takes a hand-over that raced with it, else leaves.
      if (Clock::now() >= deadline) {
        last = Attempt{};
        continue;
      }
      heard = subscriber->connection_generation(*watch);
      last = co_await wait_attempt(entry, false, deadline);
    }
  } catch (const asio::system_error& e) {
    was_cancelled = e.code() == asio::error::operation_aborted;
    failure = std::current_exception();
  } catch (...) {
    failure = std::current_exception();
  }
  // Gave up (deadline), cancelled or failed: leave the queue now, passing
  // the key on if it was handed to us meanwhile.
  static_cast<void>(was_cancelled);
  co_await uncancellable();
  co_await leave(entry);
  if (failure) std::rethrow_exception(failure);
  co_return false;
}

asio::awaitable<void> AsyncLockImpl::leave(const std::string& entry) noexcept {
  try {
    co_await uncancellable();  // the caller did so too (see uncancellable())
    const std::array<std::string_view, 1> args{entry};
    // A short grace, as the blocking Lock's (kCancelGrace): a caller whose
    // deadline passed, or who cancelled, must not wait a socket timeout for
    // a stalled server (found by review, session 17: up to 1 s past the
    // deadline). Not answered by then: the background clean-up retries.
    auto answer = co_await client_->script(scripts::cancel_wait(client_->sharded()), keys(), args, "cancel wait",
                                           Clock::now() + kLeaveGrace);
    if (answer.ended == Ended::replied) {
      if (answer.reply->type == REDIS_REPLY_INTEGER && answer.reply->integer == 3) warn_publish_denied(*client_);
      co_return;
    }
  } catch (...) {
  }
  client_->abandon(keys_, entry);
}

}  // namespace lockon::detail
