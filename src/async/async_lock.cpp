// AsyncLock's acquisition: fast path, queueing, waiting, leaving the queue
// (the algorithm of src/lock/lock.cpp on coroutines; see async_lock_impl.hpp).
#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <optional>

#include "async/async_lock_impl.hpp"
#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "common/diagnostics.hpp"
#include "common/token.hpp"
#include "lock/holder.hpp"
#include "lock/lock_scripts.hpp"

namespace lockon::detail {
namespace {

bool cancellation_requested(const asio::cancellation_state& state) noexcept {
  return state.cancelled() != asio::cancellation_type::none;
}

using Ended = AsyncConnection::Ended;
// Queue entries outlive any wait; emptied lists vanish by themselves.
constexpr std::string_view kQueueTtl = "600000";

// A slot being migrated refused the SET (or the fenced script: ASK,
// TRYAGAIN) while the holder record's SET ran: the pipeline is not resent
// (routed.hpp, partly_refused), so the SET never ran. The attempt fails
// (its record, if written, is dropped): the safe reading, as the blocking
// Lock's.
// fast_request's result then (fast_attempt decides about the record). Only
// in a cluster: elsewhere a TRYAGAIN reply is an error, thrown as one.
constexpr int kSetRefused = 2;
bool set_refused(const std::vector<ReplyPtr>& replies) noexcept {
  return replies.size() >= 2 && first_redirect(replies[0]) != nullptr && first_redirect(replies[1]) == nullptr;
}

}  // namespace

void warn_publish_denied(const AsyncClientImpl& client) {
  const std::string user = client.options().user.empty() ? std::string("default") : client.options().user;
  warn_once("acl:publish:" + client.endpoint(),
            "user '" + user + "' on " + client.endpoint() +
                " may not PUBLISH to lockon's wake-up channels ('{<key>}:wake:*'): releases cannot wake waiters, "
                "which fall back to polling every wait_poll_interval");
}

AsyncLockImpl::AsyncLockImpl(std::shared_ptr<AsyncClientImpl> client, std::string name, LockOptions options)
    : client_(std::move(client)), options_(std::move(options)) {
  // The same validation as DistributedLock's constructor.
  if (name.empty()) throw ConfigError("lock name must not be empty");
  if (!options_.no_expiry) {
    if (options_.ttl.count() <= 0)
      throw ConfigError("lock '" + name + "': ttl must be positive (set no_expiry for a lock without expiry)");
    if (options_.ttl.count() > (1LL << 47)) throw ConfigError("lock '" + name + "': ttl exceeds Redis' limit");
  }
  if (options_.token && options_.token->empty()) throw ConfigError("lock '" + name + "': custom token must not be empty");
  if (options_.wait_poll_interval.count() <= 0)
    throw ConfigError("lock '" + name + "': wait_poll_interval must be positive");
  if (options_.max_hold.count() < 0) throw ConfigError("lock '" + name + "': max_hold must not be negative");
  if (options_.keep_queue_place)
    throw ConfigError("lock '" + name + "': keep_queue_place is not supported by AsyncLock");
  keys_ = lock_script_keys(name);
  ttl_text_ = options_.no_expiry ? "0" : std::to_string(options_.ttl.count());
}

std::string AsyncLockImpl::orphan_entry() const {
  return "-|-|" + ttl_text_ + "|" + (options_.fencing ? "1" : "0") + "|" + token_;
}

void AsyncLockImpl::throw_token_in_use() const {
  throw LockError("lock '" + name() +
                      "': the key already holds this lock's custom token (another lock object with the same token, "
                      "or an acquisition never released); a custom token must identify a single holder",
                  name());
}

asio::awaitable<bool> AsyncLockImpl::acquire(Clock::time_point deadline) {
  if (held_) throw LockError("lock '" + name() + "' is already held by this object (not reentrant)", name());
  if (busy_) throw LockError("lock '" + name() + "': another operation on this object is in progress", name());
  busy_ = true;
  std::exception_ptr failure;
  bool acquired = false;
  try {
    acquired = co_await acquire_inner(deadline);
  } catch (...) {
    failure = std::current_exception();
  }
  busy_ = false;
  if (failure) std::rethrow_exception(failure);
  if (acquired && orphaned_) release_detached();
  co_return acquired;
}

asio::awaitable<bool> AsyncLockImpl::acquire_inner(Clock::time_point deadline) {
  token_ = options_.token ? *options_.token : lock_token();
  record_ = options_.holder_record ? holder_record(token_, options_.holder_label) : std::string();
  if (options_.token) {
    // Earlier attempts' clean-ups release whatever holds this token: run
    // now, they never run after this acquisition (found by review, session 17).
    const bool clear = co_await client_->forget_cleanups(keys_[0], token_, deadline);
    if (!clear) co_return false;
  }
  Attempt first = co_await fast_attempt(deadline);
  if (first.cancelled) {
    co_await uncancellable();
    co_await leave(orphan_entry());
    throw_cancelled();
  }
  // GCC 12 miscompiles co_await inside conditions: computed beforehand.
  bool confirmed = first.acquired;
  if (confirmed) {
    // Granted: from here a cancellation or any failure must pass the key on
    // before the caller is told (found by review, session 17: the key
    // stayed held for the whole lease). A cancellation may have landed while
    // the reply travelled or during confirm_lease's round trip (session 18):
    // the awaiting group (lock || timer) has dropped our result. One look
    // after confirm_lease covers both: if it did I/O, a cancellation before
    // it already threw there.
    std::exception_ptr failure;
    try {
      confirmed = co_await confirm_lease(first, Clock::time_point::max());
      const bool cancelled = cancellation_requested(co_await asio::this_coro::cancellation_state);
      if (confirmed && cancelled) throw_cancelled();
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure) {
      co_await uncancellable();
      co_await leave(orphan_entry());
      std::rethrow_exception(failure);
    }
  }
  if (confirmed) {
    on_acquired(first);
    co_return true;
  }
  if (first.deadline_passed || deadline == Clock::time_point::min() || Clock::now() >= deadline) co_return false;
  co_return co_await wait_for_turn(deadline);
}

asio::awaitable<AsyncLockImpl::Attempt> AsyncLockImpl::fast_attempt(Clock::time_point deadline) {
  Attempt result;
  result.sent_at = Clock::now();
  const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
  for (int round = 0;; ++round) {
    int outcome = 0;
    try {
      outcome = co_await fast_request(result, until);
    } catch (const ClosedError&) {
      // The reply was lost with the connection: the same random token tells
      // a win of the first request on the retry (SET ... GET).
      if (round == 0 && random_token()) continue;
      client_->abandon(keys_, orphan_entry());
      throw;
    } catch (const TimeoutError&) {
      client_->abandon(keys_, orphan_entry());
      throw;
    } catch (...) {
      // The SET won but a later step failed (the holder record, the fence,
      // a reply check): K holds our token and nobody would release it. So
      // too when an earlier round's reply was lost (it may have won; found
      // by review, session 18) or this request's outcome is unknown.
      if (result.granted || round > 0 || outcome_unknown(std::current_exception()))
        client_->abandon(keys_, orphan_entry());
      throw;
    }
    if (outcome < 0) throw_token_in_use();
    if (outcome == kSetRefused) {
      // As the blocking Lock's: on a retry after a lost reply the first
      // request may have won on the node K moved to (unknown: the clean-up
      // releases it if ours, the record left to it); else our record goes.
      if (round > 0) client_->abandon(keys_, orphan_entry());
      else co_await drop_record();
      co_return result;
    }
    result.acquired = outcome == 1;
    co_return result;
  }
}

// Returns 1 acquired, 0 busy / deadline passed / cancelled, -1 custom token in use,
// kSetRefused (set_refused).
asio::awaitable<int> AsyncLockImpl::fast_request(Attempt& result, Clock::time_point until) {
  if (options_.fencing) {
    const int outcome = co_await fenced_request(result, until);
    co_return outcome;
  }
  AsyncClientImpl::Answer answer;
  const std::array<std::string_view, 5> set_forever{"SET", keys_[0], token_, "NX", "GET"};
  const std::array<std::string_view, 7> set_lease{"SET", keys_[0], token_, "NX", "PX", ttl_text_, "GET"};
  const auto set = options_.no_expiry ? std::span<const std::string_view>(set_forever)
                                      : std::span<const std::string_view>(set_lease);
  if (record_.empty()) {
    answer = co_await client_->command(set, "acquire lock", until);
  } else {
    // The holder record rides in the same write (as the blocking Lock's).
    std::array<std::string_view, 6> who;
    const std::array<std::span<const std::string_view>, 2> commands{set, who_args(who)};
    auto outcome = co_await client_->pipeline(commands, "acquire lock", until);
    answer.ended = outcome.ended;
    if (outcome.ended == Ended::replied && client_->sharded() && set_refused(outcome.replies)) co_return kSetRefused;
    if (outcome.ended == Ended::replied) {
      if (outcome.replies[0]->type == REDIS_REPLY_ERROR) {
        co_await drop_record();  // the SET failed (WRONGTYPE, OOM...): its record must not stay behind
        check_reply(*outcome.replies[0], client_->endpoint(), "acquire lock");
      }
      result.granted = outcome.replies[0]->type == REDIS_REPLY_NIL || previous_holder_is_us(*outcome.replies[0]) == 1;
      // The record refused by a migrating slot while the SET ran: not sent
      // again (routed.hpp, partly_refused); the lock goes without a record.
      if (first_redirect(outcome.replies[1]) == nullptr)
        check_reply(*outcome.replies[1], client_->endpoint(), "record the lock's holder");
      answer.reply = std::move(outcome.replies[0]);
    }
  }
  if (answer.ended != Ended::replied) {
    // No answer: the request may still win; the caller passes it on.
    result.cancelled = answer.ended == Ended::cancelled;
    result.deadline_passed = !result.cancelled;
    if (result.deadline_passed) client_->abandon(keys_, orphan_entry());
    co_return 0;
  }
  if (answer.reply->type == REDIS_REPLY_NIL) co_return 1;
  co_return previous_holder_is_us(*answer.reply);
}

// SET NX and the fence in one script, as the blocking Lock's (every fence
// max(last + 1, the server's clock): a stale counter cannot repeat one).
asio::awaitable<int> AsyncLockImpl::fenced_request(Attempt& result, Clock::time_point until) {
  const auto& script = scripts::fenced_acquire();
  std::array<std::string_view, 7> eval{"EVALSHA", script.sha(), "2", keys_[0], keys_[2], token_, ttl_text_};
  // The holder record (NX: never the holder's) follows in the same write.
  std::array<std::string_view, 6> who;
  const std::array<std::span<const std::string_view>, 2> all{eval, who_args(who)};
  const auto commands = std::span<const std::span<const std::string_view>>(all).first(record_.empty() ? 1 : 2);
  auto outcome = co_await client_->pipeline(commands, "acquire lock", until);
  if (outcome.ended == Ended::replied && is_noscript(*outcome.replies[0])) {
    // First use on this server: the same write with the body (the record's
    // SET NX, if it ran, was ours and stays).
    eval[0] = "EVAL";
    eval[1] = script.body();
    outcome = co_await client_->pipeline(commands, "acquire lock", until);
  }
  if (outcome.ended != Ended::replied) {
    result.cancelled = outcome.ended == Ended::cancelled;
    result.deadline_passed = !result.cancelled;
    if (result.deadline_passed) client_->abandon(keys_, orphan_entry());
    co_return 0;
  }
  if (client_->sharded() && set_refused(outcome.replies)) co_return kSetRefused;
  const redisReply& reply = *outcome.replies[0];
  if (reply.type == REDIS_REPLY_ERROR) {
    if (!record_.empty()) co_await drop_record();  // nothing was acquired: the record must not stay behind
    check_reply(reply, client_->endpoint(), "acquire lock");
  }
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 2 || reply.element[0]->type != REDIS_REPLY_INTEGER)
    throw ProtocolError("acquire lock '" + name() + "' on " + client_->endpoint() + ": unexpected script reply");
  const bool set_won = reply.element[0]->integer == 1;
  const int won = set_won ? 1 : previous_holder_is_us(*reply.element[1]);
  if (won == 1 && !set_won && (reply.elements < 3 || reply.element[2]->type != REDIS_REPLY_INTEGER))
    throw ProtocolError("acquire lock '" + name() + "' on " + client_->endpoint() + ": unexpected script reply");
  result.granted = won == 1;
  if (won != 1) co_return won;
  result.fence = static_cast<std::uint64_t>(reply.element[set_won ? 1 : 2]->integer);
  co_return 1;
}

asio::awaitable<void> AsyncLockImpl::drop_record() noexcept {
  try {
    const std::array<std::string_view, 1> key{keys_[4]};
    const std::array<std::string_view, 1> args{record_};
    co_await client_->script(scripts::delete_record(), key, args, "delete a holder record",
                             bounded_by_socket_timeout(client_->options()));
  } catch (...) {
    // A record left behind expires with the lease it was written for.
  }
}

int AsyncLockImpl::previous_holder_is_us(const redisReply& previous) const {
  if (previous.type != REDIS_REPLY_STRING || std::string_view(previous.str, previous.len) != token_) return 0;
  return random_token() ? 1 : -1;
}

asio::awaitable<AsyncLockImpl::Attempt> AsyncLockImpl::wait_attempt(const std::string& entry, bool enqueue,
                                                                     Clock::time_point deadline) {
  // The 5th argument (optional) is this waiter's holder record.
  const std::array<std::string_view, 5> all{entry, enqueue ? "1" : "0", kQueueTtl, random_token() ? "1" : "0", record_};
  const auto args = std::span<const std::string_view>(all).first(record_.empty() ? 4 : 5);
  Attempt result;
  result.sent_at = Clock::now();
  auto answer = co_await client_->script(scripts::wait_attempt(client_->sharded()), keys(), args, "acquire lock", deadline);
  if (answer.ended != Ended::replied) {
    result.cancelled = answer.ended == Ended::cancelled;
    result.deadline_passed = !result.cancelled;
    co_return result;
  }
  const redisReply& reply = *answer.reply;
  // The 4th element (entries ahead) serves the blocking Lock's spin window;
  // an event loop never spins.
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 4 || reply.element[0]->type != REDIS_REPLY_INTEGER ||
      reply.element[1]->type != REDIS_REPLY_INTEGER || reply.element[2]->type != REDIS_REPLY_INTEGER)
    throw ProtocolError("acquire lock '" + name() + "' on " + client_->endpoint() + ": unexpected script reply");
  if (reply.element[2]->integer == 1) warn_publish_denied(*client_);
  if (reply.element[0]->integer < 0) throw_token_in_use();
  result.acquired = reply.element[0]->integer == 1;
  if (result.acquired) result.fence = static_cast<std::uint64_t>(reply.element[1]->integer);
  else result.pttl = reply.element[1]->integer;
  co_return result;
}

asio::awaitable<bool> AsyncLockImpl::wait_for_turn(Clock::time_point deadline) {
  // Held for the whole wait: a Sentinel switch replaces the client's; on a
  // Cluster it is the sharded subscriber of the master serving the key
  // (every master's has the same id, so our queue entry stays valid when
  // the slot moves: follow_slot below).
  std::shared_ptr<AsyncSubscriber> subscriber = co_await client_->subscriber_for(name(), deadline);
  const std::string waiter_id = random_hex(8);
  std::string entry = subscriber->id() + "|" + waiter_id + "|" + ttl_text_ + "|" + (options_.fencing ? "1" : "0") +
                      "|" + token_;
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
    } else {
      if (!move_waits_after_failover_for_tests.load(std::memory_order_relaxed)) co_return;
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
    entry = subscriber->id() + old_entry.substr(old_entry.find('|'));
    const std::array<std::string_view, 2> args{old_entry, entry};
    static_cast<void>(co_await client_->script(scripts::move_wait(), keys(), args, "move wait", deadline));
  };
  // A hand-over message proves that K holds our token only if (a) it came
  // from the subscriber of the master as the client knows it now, and (b)
  // over the connection that was up, our channel subscribed, when our last
  // attempt reached that master. Outside a cluster Redis propagates PUBLISH
  // to the replicas, which deliver it to their subscribers, while the
  // master's receiver count (the hand-over's liveness check) counts only
  // its own: a subscriber reconnected to a demoted master (the sentinels
  // kill its pub/sub clients) hears grants the new master withdrew — two
  // holders (the blocking Lock's SentinelReplicaWake tests). This client
  // closes the old master's subscriber when it switches, so (a) holds only
  // while it has not switched, and (b) then refuses a connection made
  // after the attempt. Otherwise the next attempt decides.
  const auto trusted = [&] {
    const std::uint64_t generation = watch->slot().handed_generation;
    if (generation == 0 || generation != heard) return false;
    return client_->sharded() || client_->subscriber_if_made() == subscriber;
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

asio::awaitable<bool> AsyncLockImpl::confirm_lease(Attempt& attempt, Clock::time_point until) {
  if (options_.no_expiry) co_return true;
  if (Clock::now() < add_saturating(attempt.sent_at, options_.ttl / 2)) co_return true;
  const std::array<std::string_view, 3> args{token_, ttl_text_, "0"};
  std::array<std::string_view, 3> storage;
  const auto lock_key = lease_keys(storage, !record_.empty());
  const auto sent_at = Clock::now();
  AsyncClientImpl::Answer answer;
  try {
    answer = co_await client_->script(scripts::renew(), lock_key, args, "confirm a late grant", until);
  } catch (...) {
    client_->abandon(keys_, orphan_entry());
    throw;
  }
  if (answer.ended != Ended::replied) {
    client_->abandon(keys_, orphan_entry());
    if (answer.ended == Ended::cancelled) throw_cancelled();
    co_return false;
  }
  if (answer.reply->type == REDIS_REPLY_INTEGER && answer.reply->integer == 1) {
    attempt.sent_at = sent_at;
    co_return true;
  }
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
