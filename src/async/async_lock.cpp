// AsyncLock's acquisition: the fast path and the lease's confirmation (the
// algorithm of src/lock/lock.cpp on coroutines; see async_lock_impl.hpp).
// Queueing, waiting and leaving the queue: async_lock_wait.cpp.
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
#include "lockon/name.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {
namespace {

using Ended = AsyncConnection::Ended;

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
  validate_name(name, "lock");
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
  // WAIT holds back every reply after it on its connection, and the async
  // client has one command connection that every coroutine shares: until
  // WAIT gets a connection of its own here, asking for acknowledgements is
  // refused rather than silently not honoured (it was ignored, and no
  // ReplicationError could ever come).
  if (options_.replica_acks.replicas != 0)
    throw ConfigError("lock '" + name + "': replica_acks is not supported by AsyncLock (use the blocking Lock)");
  keys_ = lock_script_keys(name);
  ttl_text_ = options_.no_expiry ? "0" : std::to_string(options_.ttl.count());
}

std::string AsyncLockImpl::orphan_entry() const {
  return queue_entry(kNotQueued, kNotQueued, ttl_text_, exclusive_kind(options_.fencing), token_);
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
      if (result.granted && outcome.replies[1]->type == REDIS_REPLY_NIL) co_await replace_stale_record(until);
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
  if (!record_.empty() && outcome.replies.size() > 1 && outcome.replies[1]->type == REDIS_REPLY_NIL)
    co_await replace_stale_record(until);
  co_return 1;
}

// The record's SET NX found an earlier holder's record: ours replaces it
// while K holds our token (the blocking Lock's replace_stale_record).
asio::awaitable<void> AsyncLockImpl::replace_stale_record(Clock::time_point until) noexcept {
  try {
    const std::array<std::string_view, 2> keys{keys_[0], keys_[4]};
    const std::array<std::string_view, 2> args{token_, record_};
    co_await client_->script(scripts::replace_record(), keys, args, "replace a stale holder record",
                             std::min(until, Clock::now() + std::chrono::seconds(1)));
  } catch (...) {
    // Best effort: the record informs operators; the holder's renewals drop a stale one.
  }
}

asio::awaitable<void> AsyncLockImpl::drop_record() noexcept {
  try {
    const std::array<std::string_view, 1> key{keys_[4]};
    const std::array<std::string_view, 1> args{record_};
    // Within the short grace of a leave (kLeaveGrace), as the blocking
    // Lock's drop_record: it follows a failed attempt, often at the
    // caller's deadline, and bounded by the socket timeout it retried a
    // Cluster's CLUSTERDOWN for most of a second after an
    // async_try_lock_for(200 ms) had failed (issue 33). A late run deletes
    // only this attempt's record.
    co_await client_->script(scripts::delete_record(), key, args, "delete a holder record",
                             Clock::now() + kLeaveGrace);
  } catch (...) {
    // A record left behind expires with the lease it was written for.
  }
}

int AsyncLockImpl::previous_holder_is_us(const redisReply& previous) const {
  if (previous.type != REDIS_REPLY_STRING || std::string_view(previous.str, previous.len) != token_) return 0;
  return random_token() ? 1 : -1;
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

}  // namespace lockon::detail
