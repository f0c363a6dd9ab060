// lockon::Lock — the single-instance lock.
//
// Uncontended, a cycle is two round trips (acquire, release script), like the
// raw SET NX PX + EVALSHA floor. Contended, a waiter subscribes to the lock's
// wake channel *before* queueing itself, so a release between its failed
// attempt and its sleep is never missed; the release hands the key straight
// to the waiter at the head of the FIFO queue.
//
// Safety rules this file keeps (each has a fault test):
// - A lease is counted from a moment that precedes its grant (the send time
//   of the request that won it, or of the waiter's last attempt before a
//   hand-over). An acquisition that cannot prove at least half a lease left
//   (the caller was paused, the reply was slow) confirms ownership with one
//   round trip, and otherwise is not an acquisition.
// - An attempt whose outcome is unknown (timeout, dropped connection,
//   deadline) is handed to Orphans, which releases whatever it may have won
//   and removes its queue place.
// - A release that fails for any reason surfaces as a lost lease.
#include "client/routed.hpp"
#include "core/fast_path.hpp"
#include "lock/lock_port.hpp"
#include "lock/lock_impl.hpp"
#include "lock/orphans.hpp"
#include "protocol/queue_entry.hpp"
#include "protocol/renewal.hpp"

namespace lockon {

namespace detail {

void warn_publish_denied(const ClientImpl& client) {
  const auto& options = client.options();
  const std::string user = options.user.empty() ? std::string("default") : options.user;
  warn_once("acl:publish:" + client.endpoint(),
            "user '" + user + "' on " + client.endpoint() +
                " may not PUBLISH to lockon's wake-up channels ('{<key>}:wake:*'): releases cannot wake "
                "waiters, which fall back to polling every wait_poll_interval. Grant the channels, e.g. "
                "ACL SETUSER " + user + " &{<key prefix>*");
}

}  // namespace detail

bool Lock::Impl::acquire_until(Clock::time_point deadline) {
  if (!state_.held_here()) renewal_.reset();  // a parent's renewal entry, in a forked child: never touched
  forget_parents_wait();
  if (state_.held)
    throw LockError("lock '" + state_.name + "' is already held by this object (not reentrant)", state_.name);
  if (wait_) return wait_for_turn(deadline);  // a kept queue place: continue from it
  // Written over the previous acquisition's strings: no allocation per cycle.
  if (state_.options.token) {
    token_ = *state_.options.token;
    // Clean-ups of this process's earlier attempts with the same token
    // release whatever holds it: they must not outlive this acquisition's
    // start (they would release it: two holders; found by review, session 17).
    if (!detail::Orphans::instance().forget(*client_.impl(), state_.name, token_, deadline)) return false;
  } else {
    detail::assign_lock_token(token_);
  }
  if (state_.options.holder_record) detail::assign_holder_record(record_, token_, state_.options.holder_label);
  else record_.clear();
  // Contended a moment ago: the fast SET NX would most likely fail, and
  // the queue's script acquires a free key just as well. Skipping it saves
  // a round trip, a server command and a context switch per contended
  // acquisition (see docs/benchmarks.md, contention across processes).
  if (queue_directly(deadline)) return wait_for_turn(deadline);
  Attempt first = fast_attempt(deadline);
  if (first.acquired && confirm_lease(first)) {
    require_acks(first.acks);
    return on_acquired(first);
  }
  if (first.deadline_passed || deadline == Clock::time_point::min() || Clock::now() >= deadline) return false;
  return wait_for_turn(deadline);
}

void Lock::Impl::release(Clock::time_point until) {
  if (!state_.held_here()) throw LockError("cannot release an unlocked lock '" + state_.name + "'", state_.name);
  stop_renewal();
  state_.held = false;
  // However the release ends: an unread attempt of this holding's wait
  // (late_entry_) is swept after it.
  struct SweepLateEntry {
    detail::LockCalls& calls;
    std::string entry;
    ~SweepLateEntry() {
      if (!entry.empty()) calls.abandon(entry, true);
    }
  } sweep_late{calls_, std::exchange(late_entry_, std::string())};
  Port port(*this);
  const auto released = detail::core::release(port, state_.token, *state_.lease, until).get();
  if (released == detail::core::Released::not_owned) throw detail::core::release_not_owned(state_.name);
}

bool Lock::Impl::owned() {
  if (!state_.held) return false;
  const std::array<std::string_view, 2> args{"GET", state_.name};
  const ReplyPtr reply = calls_.command(args, "GET");
  return reply->type == REDIS_REPLY_STRING && std::string_view(reply->str, reply->len) == state_.token;
}

bool Lock::Impl::locked() {
  const std::array<std::string_view, 2> args{"EXISTS", state_.name};
  return calls_.command(args, "EXISTS")->integer == 1;
}

std::optional<std::chrono::milliseconds> Lock::Impl::remaining_ttl() {
  const std::array<std::string_view, 2> args{"PTTL", state_.name};
  const long long pttl = calls_.command(args, "PTTL")->integer;
  if (pttl == -2) return std::nullopt;
  if (pttl == -1) return std::chrono::milliseconds::max();
  return std::chrono::milliseconds(pttl);
}

void Lock::Impl::stop_renewal() noexcept {
  if (!renewal_) return;
  detail::Watchdog::stop(*renewal_);
  renewal_.reset();
}

// An entry for the clean-up of an acquisition that has no queue place.
std::string Lock::Impl::orphan_entry(const std::string& token) const {
  return detail::queue_entry(detail::kNotQueued, detail::kNotQueued, ttl_text_,
                             detail::exclusive_kind(state_.options.fencing), token);
}

void Lock::Impl::throw_token_in_use() const {
  throw LockError("lock '" + state_.name +
                      "': the key already holds this lock's custom token (another Lock object with the same "
                      "token, or an acquisition never released); a custom token must identify a single holder",
                  state_.name);
}

// SET NX [PX] GET (or the fenced script), the record and WAIT in one write:
// what the raw floor costs. GET makes a key of the wrong type fail with
// WRONGTYPE instead of looking held.
Lock::Impl::Attempt Lock::Impl::fast_attempt(Clock::time_point deadline) {
  detail::core::FastRequest request;
  request.name = state_.name;
  request.fence_key = calls_.fence_key();
  request.who_key = calls_.who_key();
  request.token = token_;
  request.record = record_;
  request.ttl_text = ttl_text_;
  if (acks_required()) request.wait = wait_args();
  request.fencing = state_.options.fencing;
  request.no_expiry = state_.options.no_expiry;
  request.random_token = random_token();
  Port port(*this);
  return detail::core::fast_attempt(port, request, deadline).get();
}

// Deletes the who key if it still holds this attempt's record. Best effort:
// a record left behind expires with the lease it was written for. Within a
// short grace, as a cancel's (kCancelGrace): it follows a failed attempt,
// often at the caller's deadline, and unbounded it retried a Cluster's
// CLUSTERDOWN for a second after a try_lock_for(200 ms) had failed. A late
// run deletes only this attempt's record.
void Lock::Impl::drop_record() noexcept {
  if (record_.empty()) return;
  try {
    const std::array<std::string_view, 5> eval{"EVAL", detail::scripts::delete_record().body(), "1", calls_.who_key(), record_};
    calls_.command_until(eval, "delete a holder record", Clock::now() + kCancelGrace);
  } catch (...) {
  }
}

// The record's SET NX in the acquiring write found an earlier holder's
// record (a forced release, an expiry): ours replaces it while K holds our
// token, one more round trip in that case only: a record names the current
// holder or is absent. Best effort: the record informs operators, it
// decides nothing.
void Lock::Impl::replace_stale_record(Clock::time_point until) noexcept {
  try {
    const std::array<std::string_view, 7> eval{"EVAL", detail::scripts::replace_record().body(), "2", state_.name,
                                               calls_.who_key(), token_, record_};
    calls_.command_until(eval, "replace a stale holder record",
                         std::min(until, Clock::now() + std::chrono::seconds(1)));
  } catch (...) {
  }
}

std::span<const std::string_view> Lock::Impl::wait_args() {
  if (!wait_text_) wait_text_.emplace(state_.options.replica_acks);
  wait_command_ = wait_text_->args();
  return wait_command_;
}

// Fewer acknowledgements than required: the grant is given back (or left
// to the clean-up if the release fails) and the caller told how many.
void Lock::Impl::require_acks(int acks) {
  const int required = state_.options.replica_acks.replicas;
  if (required <= 0 || acks >= required) return;
  try {
    const std::array<std::string_view, 1> args{token_};
    calls_.run_lock_script(detail::scripts::release(calls_.sharded()), args, "release an unreplicated lock");
  } catch (...) {
    calls_.abandon(orphan_entry(token_), true);
  }
  throw detail::not_enough_replicas(state_.name, client_.endpoint(), acks, state_.options.replica_acks);
}

// A grant is only as good as the lease we can prove: counted from a send
// time that precedes it. With less than half a lease provably left (we
// were paused, the reply or the wake-up was slow), ask the server: one
// round trip that also restarts the lease. Returns false when the key is
// no longer ours (the lease ran out and someone else may have run).
bool Lock::Impl::confirm_lease(Attempt& attempt, Clock::time_point until) {
  if (state_.options.no_expiry) return true;
  const auto half = state_.options.ttl / 2;
  if (Clock::now() < detail::add_saturating(attempt.sent_at, half)) return true;
  const std::array<std::string_view, 3> args{token_, ttl_text_, "0"};
  const auto sent_at = Clock::now();
  ReplyPtr reply;
  try {
    // The lease's keys (K, its holder record, the hand-over record), as every
    // renewal: the renewal script reads KEYS[2] as the holder record and
    // sets its expiry, so it must never be handed the queue.
    reply = calls_.run1_as_process_until(detail::scripts::renew(), args, "confirm a late grant", until);
  } catch (...) {
    calls_.abandon(orphan_entry(token_), true);
    throw;
  }
  if (!reply) {
    calls_.abandon(orphan_entry(token_), true);
    return false;
  }
  if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) {
    attempt.sent_at = sent_at;
    return true;
  }
  return false;
}

bool Lock::Impl::on_acquired(const Attempt& attempt) {
  state_.held = true;
  state_.token = token_;
  state_.fence = attempt.fence;
  state_.handed_over = attempt.handed;
  state_.begin_lease();
  if (!state_.options.no_expiry)
    state_.lease->set_lease_end(detail::add_saturating(attempt.sent_at, state_.options.ttl));
  if (state_.options.auto_renew && !state_.options.no_expiry) {
    auto entry = std::make_shared<detail::RenewalEntry>();
    entry->name = state_.name;
    entry->ttl = state_.options.ttl;
    entry->signal = state_.lease;
    entry->client = client_.impl();
    entry->token = token_;
    const auto now = Clock::now();
    entry->next_due = detail::add_saturating(now, detail::renew_period(state_.options.ttl));
    entry->lease_expires = detail::add_saturating(attempt.sent_at, state_.options.ttl);
    if (state_.options.max_hold.count() > 0) entry->hold_deadline = detail::add_saturating(now, state_.options.max_hold);
    renewal_ = entry;
    detail::Watchdog::instance().add(std::move(entry));
  } else if (!state_.options.no_expiry) {
    // Not renewed, the lease simply ends: the watchdog signals that end
    // (stop token, on_lost) as it signals a renewal's failure.
    renewal_ = detail::Watchdog::instance().watch_lease_end(state_.name, state_.lease);
  }
  return true;
}

Lock::Lock(Client client, std::string name, LockOptions options)
    : DistributedLock(std::move(name), std::move(options)), impl_(std::make_unique<Impl>(std::move(client), state())) {}

Lock::~Lock() {
  unlock();
  impl_->abandon_wait();
  impl_->stop_renewal();
}

bool Lock::acquire_until(Clock::time_point deadline) { return impl_->acquire_until(deadline); }
void Lock::release() { impl_->release(); }
void Lock::release_until(Clock::time_point deadline) { impl_->release(deadline); }
void Lock::extend(std::chrono::milliseconds additional, bool replace_ttl) { impl_->extend(additional, replace_ttl); }
void Lock::reacquire() { impl_->reacquire(); }
bool Lock::owned() { return impl_->owned(); }
bool Lock::locked() { return impl_->locked(); }
std::optional<std::chrono::milliseconds> Lock::remaining_ttl() { return impl_->remaining_ttl(); }
void Lock::abandon_wait() noexcept { impl_->abandon_wait(); }

}  // namespace lockon
