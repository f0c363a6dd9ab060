// The waiting path of lockon::Lock: a waiter subscribes to the lock's wake
// channel, queues itself, and sleeps until a release hands it the key (see
// lock.cpp for the safety rules both files keep).
#include "common/test_hooks.hpp"
#include "core/wait_attempt.hpp"
#include "lock/lock_impl.hpp"
#include "lock/lock_port.hpp"
#include "lock/wake_proof.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon {

// Gives up a queue place kept between timed attempts (keep_queue_place).
void Lock::Impl::abandon_wait() noexcept {
  forget_parents_wait();
  if (!wait_) return;
  cancel_wait_place(false);
}

// Drops the wait (its watch first) and cancels its entry, after the entry
// an unanswered move may still rename into it (moved_from): cancelled
// first, so that move finds nothing to rename however late it runs (the
// entry's late-request sweeps remove a renamed entry only at their next
// pass, and not at all after their last, 5 s after the cancel; a release
// in between could hand K to it).
void Lock::Impl::cancel_wait_place(bool late_request) noexcept {
  const std::string entry = wait_->entry;
  const std::string moved_from = wait_->moved_from;
  late_request = late_request || wait_->late_request;
  wait_.reset();
  if (!moved_from.empty()) calls_.cancel_now(moved_from, kCancelGrace, true);
  calls_.cancel_now(entry, kCancelGrace, late_request);
}

// One scripted attempt of a queued waiter (core/wait_attempt.hpp).
Lock::Impl::Attempt Lock::Impl::wait_attempt(const std::string& entry, bool enqueue, Clock::time_point deadline) {
  const detail::core::WaitRequest request{state_.name, entry, record_, random_token()};
  Port port(*this);
  return detail::core::wait_attempt(port, request, enqueue, deadline).get();
}

// Queues behind the current holder and sleeps until a release hands us
// the lock (no round trip then), the holder's lease runs out, or the poll
// interval passes (safety net if a message was missed).
bool Lock::Impl::wait_for_turn(Clock::time_point deadline) {
  const bool resumed = wait_ != nullptr;
  if (!resumed) {
    // Bounded by the deadline like every step (a Cluster re-reading its
    // map, issue 33): null when it passed first; nothing was queued.
    auto node = client_.impl()->node_for(state_.name, deadline);
    if (!node) return false;
    auto& subscriber = subscriber_of(*node);
    const std::string waiter_id = detail::random_hex(8);
    wait_ = std::make_unique<Wait>();
    wait_->node = std::move(node);
    wait_->waiter_id = waiter_id;
    wait_->token = token_;
    wait_->queued_at = Clock::now();
    wait_->entry =
        detail::queue_entry(subscriber.id(), waiter_id, ttl_text_, detail::exclusive_kind(state_.options.fencing), token_);
    wait_->watch = std::make_unique<detail::Subscriber::Watch>(
        subscriber.watch(waiter_id, detail::wake_channel(state_.name, subscriber.id())));
    // Subscribed before queueing: a hand-over can't precede our ability
    // to hear about it. Bounded, so a dead subscriber only costs polling.
    wait_->watch->wait_subscribed(
        std::min(deadline, detail::add_saturating(Clock::now(), state_.options.wait_poll_interval)));
  } else {
    token_ = wait_->token;
  }
  try {
    Attempt last = attempt_in_line(!resumed, deadline);
    bool waited = resumed;
    while (true) {
      if (last.acquired && confirm_lease(last)) {
        note_contention(waited);
        return finish_wait(last);
      }
      waited = true;
      if (!last.deadline_passed) wait_->last = last;
      const auto now = Clock::now();
      if (last.deadline_passed || now >= deadline) return give_up(last.deadline_passed && !last.unsent);
      auto wake_at = std::min(deadline, detail::add_saturating(now, state_.options.wait_poll_interval));
      // A holder that crashed releases nothing: look again when its lease ends.
      if (last.pttl >= 0)
        wake_at = std::min(wake_at, detail::add_saturating(last.sent_at, std::chrono::milliseconds(last.pttl + 1)));
      follow_node(wake_at, deadline);
      // One spin window per wait: a periodic attempt behind a stalled
      // holder sleeps (HandoffSpinFaults.StalledHolderCostsAtMostOneSpinPerWait).
      detail::SpinWindow spin;
      if (!wait_->spun) {
        spin = detail::spin_window(last.sent_at, last.ahead, wait_->watch->handoff_interval(),
                                   state_.options.handoff_spin);
        wait_->spun = !spin.empty();
      }
      const bool handed = wait_->watch->wait_until(wake_at, spin) == detail::Subscriber::Slot::Wake::handed;
      if (handed && wake_trusted()) {
        wait_->watch->note_handoff(Clock::now() - last.sent_at, last.ahead);
        Attempt handed_over = handed_attempt();
        if (confirm_lease(handed_over)) {
          note_contention(true);
          return finish_wait(handed_over);
        }
      }
      // Past the deadline nothing more is sent: its reply could not be read
      // in time, and on a pooled connection an unread reply breaks it and
      // leaves an attempt that may run after our cancel (found by review,
      // session 20). give_up() takes a hand-over that raced with it, and one
      // it may not trust still marked handed: its cancel passes K on (with
      // keep_queue_place a reset mark would keep the place, and K with it).
      if (Clock::now() >= deadline) return give_up(false);
      // Handed, but the lease ran out while we did not run, or the message
      // is no proof (wake_trusted): the attempt decides. A real hand-over is
      // taken there (K holds our token, the record names us).
      if (handed) reset_slot();
      last = attempt_in_line(false, deadline);
    }
  } catch (...) {
    cancel_wait_place(detail::outcome_unknown(std::current_exception()));
    throw;
  }
}

// One attempt from our queue place. The subscriber's connection is noted
// first: a hand-over message is taken as proof only if it came over that
// connection (wake_trusted).
Lock::Impl::Attempt Lock::Impl::attempt_in_line(bool enqueue, Clock::time_point deadline) {
  wait_->heard_generation = wait_->watch->connection_generation();
  if (detail::test_hooks::after_heard_sampled != nullptr) detail::test_hooks::after_heard_sampled();
  return wait_attempt(wait_->entry, enqueue, deadline);
}

// Whether the hand-over message proves K holds our token (lock/wake_proof.hpp).
bool Lock::Impl::wake_trusted() {
  return detail::wake_proves_grant(*wait_->watch, wait_->heard_generation, *client_.impl(), state_.name, wait_->node,
                                   calls_.sharded());
}

// The node serving K changed. Cluster: follow_slot. Elsewhere (Sentinel:
// a failover) our queue entry names a subscriber on the old master, which a
// release on the new one never counts as listening: every grant to us
// would be withdrawn, and we would be queued again at the tail, forever
// (and a demoted old master delivers the withdrawn wake-ups, see
// wake_trusted). So the wait moves to the new master's subscriber.
void Lock::Impl::follow_node(Clock::time_point until, Clock::time_point deadline) {
  if (calls_.sharded()) {
    follow_slot(until);
    return;
  }
  std::shared_ptr<detail::Node> node;
  try {
    node = client_.impl()->node_for(state_.name, Clock::now());  // cached; a resolution runs in the background
  } catch (...) {
    return;  // no master known now: the next attempt reports it
  }
  if (!node || node == wait_->node) return;
  {
    auto& slot = wait_->watch->slot();
    std::lock_guard lock(slot.mutex);
    if (slot.handed) return;  // the loop looks first (not trusted: an attempt), then comes back
  }
  if (detail::test_hooks::move_waits_after_failover.load(std::memory_order_relaxed))
    move_wait(std::move(node), until, deadline);
}

// Listens on `node`'s subscriber and puts our entry, renamed for it, in the
// old one's place (same waiter id and token: a hand-over to the old entry
// is still ours, the next attempt takes it). The old entry is not
// cancelled: a cancel whose reply is lost is retried in the background,
// where it would pass on K if K held our token — which a grant to the new
// entry (same token) may have made so. If the move's outcome is unknown the
// old entry may stay queued; a release reaching it publishes on the old
// subscriber's channel, which nobody on the master hears, and hands K on in
// the same script. If the old entry was gone, our next attempt queues the
// new one.
void Lock::Impl::move_wait(std::shared_ptr<detail::Node> node, Clock::time_point until, Clock::time_point deadline) {
  auto& subscriber = subscriber_of(*node);
  const std::string old_entry = wait_->entry;
  const std::string entry = detail::entry_for_subscriber(old_entry, subscriber.id());
  auto watch = std::make_unique<detail::Subscriber::Watch>(
      subscriber.watch(wait_->waiter_id, detail::wake_channel(state_.name, subscriber.id())));
  wait_->watch = std::move(watch);  // the old watch goes before the node that holds its subscriber
  wait_->node = std::move(node);
  wait_->entry = entry;
  wait_->heard_generation = 0;  // no attempt from here yet: nothing heard is trusted
  // Subscribed before the entry names this subscriber, as when queueing.
  wait_->watch->wait_subscribed(until);
  const std::array<std::string_view, 2> args{old_entry, entry};
  // No reply by the deadline: the move may still run, after our cancel
  // (which the clean-up then repeats, as for a late attempt), and rename
  // the old entry, if still queued, into ours once the clean-up is over:
  // whoever ends the place cancels the old entry too (cancel_wait_place).
  if (!calls_.run_lock_script_until(detail::scripts::move_wait(), args, "move wait", deadline)) {
    wait_->late_request = true;
    wait_->moved_from = old_entry;
  }
}

// Cluster: the key's slot moved to another master (our last attempt
// followed a MOVED, so the map knows): listen on that master's shard
// channel instead. Subscriber ids are the same on every node of a
// cluster, so our queue entry stays valid. A wake-up published on the old
// node meanwhile is not lost: the key then holds our token and the hand-
// over record names us, which the next attempt sees.
void Lock::Impl::follow_slot(Clock::time_point until) {
  if (!calls_.sharded()) return;
  // Null when a map read outlasts `until`: keep listening where we are.
  auto node = client_.impl()->node_for(state_.name, until);
  if (!node || node == wait_->node) return;
  {
    auto& slot = wait_->watch->slot();
    std::lock_guard lock(slot.mutex);
    if (slot.handed) return;  // the loop takes it first
  }
  auto& subscriber = subscriber_of(*node);
  wait_->watch.reset();
  wait_->node = std::move(node);
  wait_->watch = std::make_unique<detail::Subscriber::Watch>(
      subscriber.watch(wait_->waiter_id, detail::wake_channel(state_.name, subscriber.id())));
  wait_->heard_generation = 0;  // generations are per subscriber: nothing heard is trusted before the next attempt
  wait_->watch->wait_subscribed(until);
}

// The release set the key to our token before publishing; the lease
// started after our entry was queued (not necessarily after our last
// attempt: the wake-up may have been delayed past it).
Lock::Impl::Attempt Lock::Impl::handed_attempt() {
  Attempt handed;
  handed.acquired = true;
  handed.handed = true;
  handed.fence = wait_->watch->slot().fence;
  handed.sent_at = wait_->queued_at;
  return handed;
}

void Lock::Impl::reset_slot() {
  auto& slot = wait_->watch->slot();
  std::lock_guard lock(slot.mutex);
  slot.handed = false;
}

// Deadline passed. If a hand-over raced with it, take the lock after all
// rather than bouncing it: we own it already.
bool Lock::Impl::give_up(bool late_request) {
  // Kept with the place: a hand-over taken here (finish_wait), a kept
  // place and the cancel below all read it from the Wait.
  wait_->late_request = wait_->late_request || late_request;
  if (wait_->watch->wait_until(Clock::time_point::min()) == detail::Subscriber::Slot::Wake::handed) {
    if (wake_trusted()) {
      Attempt handed = handed_attempt();
      if (confirm_lease(handed, Clock::now() + kCancelGrace)) return finish_wait(handed);
    }
    // A message that is no proof (wake_trusted): the cancel below passes K
    // on if it holds our token. Not confirmed in time: confirm_lease
    // abandoned the grant, and its clean-up (three sweeps, up to ~1 s
    // later) releases whatever holds our token. A kept place would resume with that token and be released
    // under its next grant: two holders (found by review, session 18). The
    // place goes with the token; the next attempt starts afresh.
    reset_slot();
  } else if (state_.options.keep_queue_place) {
    // The next timed attempt continues from our place; whoever ends it
    // (abandon_wait, lock_on, the destructor) learns of an unread request
    // from the Wait (found by review, session 20: lock_on keeps its places).
    return false;
  }
  cancel_wait_place(false);
  return false;
}

bool Lock::Impl::finish_wait(const Attempt& attempt) {
  // Before wait_ goes: a failure here leaves through wait_for_turn's
  // clean-up, which removes our queue place.
  if (acks_required()) replicate_grant();
  late_entry_ = wait_->late_request ? wait_->entry : std::string();
  wait_.reset();
  return on_acquired(attempt);
}

// A grant that reached us by hand-over (or by a waiter's script) was
// written by another connection — the releaser's, or a pooled one: our own
// write first, then WAIT, in one pipeline (protocol/replica_acks.hpp).
void Lock::Impl::replicate_grant() {
  const std::array<std::string_view, 5> eval{"EVAL", detail::touch_grant().body(), "1", state_.name, token_};
  const std::array<std::span<const std::string_view>, 2> commands{eval, wait_args()};
  std::vector<ReplyPtr> replies;
  try {
    replies = calls_.pipeline_until(commands, "WAIT for replicas", Clock::time_point::max(), replica_wait());
    for (const ReplyPtr& reply : replies) detail::check_reply(*reply, client_.endpoint(), "WAIT for replicas");
  } catch (...) {
    calls_.abandon(orphan_entry(token_), true);
    throw;
  }
  if (replies[0]->type != REDIS_REPLY_INTEGER || replies[0]->integer != 1)
    throw LockNotOwned("lock '" + state_.name + "' was handed to us but lost before its replication was confirmed",
                       state_.name);
  require_acks(static_cast<int>(replies[1]->integer));
}

}  // namespace lockon
