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
#include "async/async_lock_port.hpp"
#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "common/diagnostics.hpp"
#include "common/token.hpp"
#include "protocol/holder_record.hpp"
#include "protocol/lock_options.hpp"
#include "protocol/lock_scripts.hpp"
#include "protocol/replica_acks.hpp"
#include "lockon/name.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {
namespace {

using Ended = AsyncConnection::Ended;

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
  validate_lock_options(name, options_);
  if (options_.keep_queue_place)
    throw ConfigError("lock '" + name + "': keep_queue_place is not supported by AsyncLock");
  // WAIT runs on a connection of the client's own (exchange_aside), which a
  // Cluster client does not have per node yet.
  if (acks_required() && client_->sharded())
    throw ConfigError("lock '" + name +
                      "': replica_acks is not supported by AsyncLock on a Redis Cluster (use the blocking Lock)");
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
  client_->acquisition_begins();
  token_ = options_.token ? *options_.token : lock_token();
  record_ = options_.holder_record ? holder_record(token_, options_.holder_label) : std::string();
  if (options_.token) {
    // Earlier attempts' clean-ups release whatever holds this token: run
    // now, they never run after this acquisition; a release with it still
    // running is waited for first (it may yet file one).
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
      if (confirmed && acks_required()) co_await replicate_grant();
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

// The grant reached us through the shared connection (or a releaser's):
// our own write, then WAIT, on a connection of its own
// (protocol/replica_acks.hpp). A failure throws: the caller's failure path
// passes K on (leave()).
asio::awaitable<void> AsyncLockImpl::replicate_grant() {
  const ReplicaAcks& acks = options_.replica_acks;
  std::string resp;
  const std::array<std::string_view, 5> touch{"EVAL", touch_grant().body(), "1", keys_[0], token_};
  append_resp(resp, touch);
  const WaitCommand wait(acks);
  append_resp(resp, wait.args());
  const auto until = add_saturating(bounded_by_socket_timeout(client_->options()), acks.timeout);
  auto outcome = co_await client_->exchange_aside(std::move(resp), 2, until, "WAIT for replicas");
  if (outcome.ended == Ended::cancelled) throw_cancelled();
  if (outcome.ended != Ended::replied)
    throw TimeoutError("lock '" + name() + "' on " + client_->endpoint() +
                       ": WAIT for replicas: no reply within the socket timeout plus the replica timeout");
  for (const ReplyPtr& reply : outcome.replies) check_reply(*reply, client_->endpoint(), "WAIT for replicas");
  if (outcome.replies[0]->type != REDIS_REPLY_INTEGER || outcome.replies[0]->integer != 1)
    throw LockNotOwned("lock '" + name() + "' was granted but lost before its replication was confirmed", name());
  const auto acknowledged = outcome.replies[1]->type == REDIS_REPLY_INTEGER ? outcome.replies[1]->integer : 0;
  if (acknowledged < acks.replicas) throw not_enough_replicas(name(), client_->endpoint(), static_cast<int>(acknowledged), acks);
  // A cancellation that landed while the WAIT's reply travelled: the
  // awaiting group has dropped our result, so the grant must be passed on
  // (the caller's failure path), not reported (as confirm_lease's check).
  const bool cancelled = cancellation_requested(co_await asio::this_coro::cancellation_state);
  if (cancelled) throw_cancelled();
}

asio::awaitable<AsyncLockImpl::Attempt> AsyncLockImpl::fast_attempt(Clock::time_point deadline) {
  core::FastRequest request;
  request.name = keys_[0];
  request.fence_key = keys_[2];
  request.who_key = keys_[4];
  request.token = token_;
  request.record = record_;
  request.ttl_text = ttl_text_;
  request.fencing = options_.fencing;
  request.no_expiry = options_.no_expiry;
  request.random_token = random_token();
  Port port(*this);
  Attempt attempt = co_await core::fast_attempt(port, request, deadline);
  co_return attempt;
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
    // caller's deadline, and must not retry a Cluster's CLUSTERDOWN for a
    // socket timeout past it. A late run deletes only this attempt's record.
    co_await client_->script(scripts::delete_record(), key, args, "delete a holder record",
                             Clock::now() + kLeaveGrace);
  } catch (...) {
    // A record left behind expires with the lease it was written for.
  }
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
