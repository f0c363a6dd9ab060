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
#include "lock/lock_impl.hpp"
#include "lock/orphans.hpp"
#include "protocol/queue_entry.hpp"

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
  const std::array<std::string_view, 1> args{state_.token};
  ReplyPtr reply;
  try {
    reply = calls_.run_lock_script_until(detail::scripts::release(calls_.sharded()), args, "release lock", until);
  } catch (const Error& e) {
    // Whether the release ran is unknown, so the lease cannot be proven
    // held to its end. The clean-up releases it if it is still ours.
    calls_.abandon(orphan_entry(state_.token), true);
    state_.lease->declare_lost(LossReason::unreachable, std::string("the release failed: ") + e.what());
    throw;
  }
  if (!reply) {
    // `until` passed first (a frozen master, a Cluster answering
    // CLUSTERDOWN): whether the release ran is unknown, as above, but the
    // caller chose not to wait for it; not an error.
    calls_.abandon(orphan_entry(state_.token), true);
    state_.lease->declare_lost(LossReason::unreachable, "the release was not confirmed in time; a background clean-up releases the key if it is still ours");
    return;
  }
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1) {
    state_.lease->declare_lost(LossReason::taken, "the key expired or is held by another owner");
    throw LockNotOwned("cannot release lock '" + state_.name + "': it is no longer owned", state_.name);
  }
  if (reply->integer == 2) warn_publish_denied(*client_.impl());
  state_.lease->close();
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

// SET NX [PX] GET (or the fenced script): what the raw floor costs. GET
// makes a key of the wrong type fail with WRONGTYPE instead of looking
// held. A reply lost with the connection is retried once with the same
// token: finding the key already holding our random token means the first
// request won.
Lock::Impl::Attempt Lock::Impl::fast_attempt(Clock::time_point deadline) {
  Attempt result;
  result.sent_at = Clock::now();
  const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
  for (int round = 0;; ++round) {
    try {
      const int outcome = fast_request(result, until);
      if (outcome < 0) throw_token_in_use();
      if (outcome == kSetRefused) {
        // A migrating slot refused the SET while the record's SET ran. On a
        // retry after a lost reply the first request may have won (K moved
        // to the target with our token): unknown, so the clean-up releases
        // it if it is ours, and our record is left to it. Else nothing of
        // ours holds K: the record, if written, goes (review, session 19).
        if (round > 0) calls_.abandon(orphan_entry(token_), true);
        else drop_record();
        return result;
      }
      result.acquired = outcome == 1;
      return result;
    } catch (const ClosedError&) {
      if (round == 0 && random_token()) continue;
      calls_.abandon(orphan_entry(token_), true);
      throw;
    } catch (const TimeoutError&) {
      calls_.abandon(orphan_entry(token_), true);
      throw;
    } catch (...) {
      // The SET won but a later step failed (WAIT refused, the fence's
      // round trip, an error reply after EXEC): K holds our token and
      // nobody will release it. The clean-up hands it on (or deletes it
      // and its record) as a release would. So too when an earlier round's
      // reply was lost (it may have won; found by review, session 18) or
      // this request's outcome is unknown.
      const bool unknown = round > 0 || detail::outcome_unknown(std::current_exception());
      if (result.granted || unknown) calls_.abandon(orphan_entry(token_), unknown);
      else drop_record();  // the SET failed (WRONGTYPE, OOM...): its record must not stay behind
      throw;
    }
  }
}

// Deletes the who key if it still holds this attempt's record. Best effort:
// a record left behind expires with the lease it was written for. Within a
// short grace, as a cancel's (kCancelGrace): it follows a failed attempt,
// often at the caller's deadline, and unbounded it retried a Cluster's
// CLUSTERDOWN for a second after a try_lock_for(200 ms) had failed (issue
// 33). A late run deletes only this attempt's record.
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
void Lock::Impl::replace_stale_record(const redisReply& record_reply, Clock::time_point until) noexcept {
  if (record_reply.type != REDIS_REPLY_NIL) return;  // OK: ours was written (or an error reply: nothing to fix)
  try {
    const std::array<std::string_view, 7> eval{"EVAL", detail::scripts::replace_record().body(), "2", state_.name,
                                               calls_.who_key(), token_, record_};
    calls_.command_until(eval, "replace a stale holder record",
                         std::min(until, Clock::now() + std::chrono::seconds(1)));
  } catch (...) {
  }
}

// Returns 1 acquired, 0 busy or deadline passed, -1 custom token in use,
// kSetRefused (set_refused).
int Lock::Impl::fast_request(Attempt& result, Clock::time_point until) {
  if (state_.options.fencing) return fenced_request(result, until);
  ReplyPtr reply;
  const std::array<std::string_view, 5> set_forever{"SET", state_.name, token_, "NX", "GET"};
  const std::array<std::string_view, 7> set_lease{"SET", state_.name, token_, "NX", "PX", ttl_text_, "GET"};
  const auto set = state_.options.no_expiry ? std::span<const std::string_view>(set_forever)
                                            : std::span<const std::string_view>(set_lease);
  if (acks_required() || !record_.empty()) {
    // The holder record rides in the same write (lock/holder.hpp): NX, so
    // an attempt that loses never overwrites the holder's record.
    // WAIT in the same write, on the same connection as the SET: it covers
    // exactly this connection's writes. A SET that did not win wrote
    // nothing, and WAIT then returns at once.
    std::array<std::span<const std::string_view>, 3> all{set};
    std::size_t count = 1;
    if (!record_.empty()) all[count++] = who_args();
    if (acks_required()) all[count++] = wait_args();
    const std::span<const std::span<const std::string_view>> commands(all.data(), count);
    std::vector<ReplyPtr> replies = calls_.pipeline_until(commands, "acquire lock", until, replica_wait());
    if (replies.empty()) return deadline_passed(result);
    if (set_refused(replies)) return kSetRefused;
    reply = std::move(replies[0]);
    detail::check_reply(*reply, client_.endpoint(), "acquire lock");
    // The SET's outcome before WAIT's: a refused WAIT after a won SET must
    // not leave K held (fast_attempt).
    result.granted = reply->type == REDIS_REPLY_NIL || previous_holder_is_us(*reply) == 1;
    if (acks_required()) {
      detail::check_reply(*replies.back(), client_.endpoint(), "WAIT for replicas");
      result.acks = static_cast<int>(replies.back()->integer);
    }
    if (result.granted && !record_.empty()) replace_stale_record(*replies[1], until);
  } else {
    reply = calls_.command_until(set, "acquire lock", until);
  }
  if (!reply) return deadline_passed(result);
  if (reply->type == REDIS_REPLY_NIL) {
    result.acquired = true;
    return 1;
  }
  return previous_holder_is_us(*reply);
}

// Fencing: SET NX and the fence in one script (scripts::fenced_acquire():
// every fence is max(last + 1, the server's clock), so a counter that came
// back stale after a restart or failover cannot repeat one). The holder
// record and WAIT ride in the same write, as on the plain path.
int Lock::Impl::fenced_request(Attempt& result, Clock::time_point until) {
  const auto& script = detail::scripts::fenced_acquire();
  // With WAIT in the write, the body itself: a NOSCRIPT would have WAIT
  // wait for the holder record alone, and the retry wait again.
  std::array<std::string_view, 7> eval{acks_required() ? "EVAL" : "EVALSHA",
                                       acks_required() ? std::string_view(script.body()) : std::string_view(script.sha()),
                                       "2", state_.name, calls_.fence_key(), token_, ttl_text_};
  std::array<std::span<const std::string_view>, 3> commands_buffer{eval};
  std::size_t count = 1;
  if (!record_.empty()) commands_buffer[count++] = who_args();
  if (acks_required()) commands_buffer[count++] = wait_args();
  const std::span<const std::span<const std::string_view>> commands(commands_buffer.data(), count);
  std::vector<ReplyPtr> replies = calls_.pipeline_until(commands, "acquire lock", until, replica_wait());
  if (replies.empty()) return deadline_passed(result);
  if (eval[0] == "EVALSHA" && detail::is_noscript(*replies[0])) {
    // First use on this server (or after a restart or SCRIPT FLUSH): the
    // same write with the body. The holder record's SET NX, if it ran, was
    // ours and stays.
    eval[0] = "EVAL";
    eval[1] = script.body();
    replies = calls_.pipeline_until(commands, "acquire lock", until, replica_wait());
    if (replies.empty()) return deadline_passed(result);
  }
  if (set_refused(replies)) return kSetRefused;
  // The script's outcome before any other reply: a failure after a won SET
  // must not leave K held (fast_attempt).
  const redisReply& outcome = *replies[0];
  detail::check_reply(outcome, client_.endpoint(), "acquire lock");
  if (outcome.type != REDIS_REPLY_ARRAY || outcome.elements < 2 || outcome.element[0]->type != REDIS_REPLY_INTEGER)
    throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.endpoint() + ": unexpected script reply");
  int won = 1;
  if (outcome.element[0]->integer != 1) {
    won = previous_holder_is_us(*outcome.element[1]);
    if (won == 1 && (outcome.elements < 3 || outcome.element[2]->type != REDIS_REPLY_INTEGER))
      throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.endpoint() + ": unexpected script reply");
  }
  result.granted = won == 1;
  if (acks_required()) {
    detail::check_reply(*replies.back(), client_.endpoint(), "WAIT for replicas");
    result.acks = static_cast<int>(replies.back()->integer);
  }
  if (won != 1) return won;
  if (!record_.empty()) replace_stale_record(*replies[1], until);
  result.acquired = true;
  result.fence = static_cast<std::uint64_t>(outcome.element[outcome.element[0]->integer == 1 ? 1 : 2]->integer);
  return 1;
}

// A slot being migrated refused the SET (or the fenced script: ASK,
// TRYAGAIN) while the holder record's SET ran: the pipeline is not resent
// (LockCalls::pipeline_until), so this SET never ran. Not acquired
// (fast_attempt decides what becomes of the record). Failing the attempt is
// the safe reading: resending only the SET would need the WAIT and the
// record on the node it then runs on.
bool Lock::Impl::set_refused(const std::vector<ReplyPtr>& replies) noexcept {
  // Only a cluster redirects: elsewhere a TRYAGAIN (say) is an error reply,
  // thrown as one (LockFaults.ErrorReplyToTheAcquisitionLeavesThePoolInStep).
  if (!calls_.sharded() || record_.empty() || replies.size() < 2) return false;
  return detail::first_redirect(replies[0]) != nullptr && detail::first_redirect(replies[1]) == nullptr;
}

// SET ... GET answered with the previous value: our own random token means
// a first request whose reply was lost won (its lease started at
// result.sent_at); a custom token held by someone else is misuse.
int Lock::Impl::previous_holder_is_us(const redisReply& previous) const {
  if (previous.type != REDIS_REPLY_STRING || std::string_view(previous.str, previous.len) != token_) return 0;
  return random_token() ? 1 : -1;
}

int Lock::Impl::deadline_passed(Attempt& result) {
  // No answer before the deadline: the request may still win later.
  calls_.abandon(orphan_entry(token_), true);
  result.deadline_passed = true;
  return 0;
}

// SET who <record> NX [PX ttl]: the fast path's holder record.
std::span<const std::string_view> Lock::Impl::who_args() {
  who_command_ = {"SET", calls_.who_key(), record_, "NX", "PX", ttl_text_};
  return std::span<const std::string_view>(who_command_).first(state_.options.no_expiry ? 4 : 6);
}

std::span<const std::string_view> Lock::Impl::wait_args() {
  wait_replicas_ = std::to_string(state_.options.replica_acks.replicas);
  wait_timeout_ = std::to_string(state_.options.replica_acks.timeout.count());
  wait_command_ = {"WAIT", wait_replicas_, wait_timeout_};
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
  throw ReplicationError("lock '" + state_.name + "' on " + client_.endpoint() + ": " + std::to_string(acks) +
                             " of " + std::to_string(required) + " required replicas acknowledged the grant within " +
                             std::to_string(state_.options.replica_acks.timeout.count()) +
                             " ms (WAIT); the lock was released",
                         state_.name, acks, required);
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
    entry->next_due = detail::add_saturating(now, std::max(state_.options.ttl / 3, std::chrono::milliseconds(1)));
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
