// AsyncLock's holding: the acquisition's lease, renewal on a timer of the
// executor, release and extension (acquisition: async_lock.cpp).
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "async/async_lock_impl.hpp"
#include "async/async_lock_port.hpp"
#include "common/diagnostics.hpp"
#include "common/token.hpp"
#include "client/eviction_check.hpp"
#include "protocol/lock_scripts.hpp"
#include "protocol/queue_entry.hpp"
#include "protocol/renewal.hpp"

namespace lockon::detail {
namespace {
using Ended = AsyncConnection::Ended;

constexpr std::chrono::milliseconds kEvictionCheckTimeout{300};

// Whether this process has not asked the server at `endpoint` yet: each
// server is asked once, like the blocking Lock's renewal lane does.
bool first_eviction_check(const std::string& endpoint) {
  static std::mutex& mutex = *new std::mutex;  // leaked: used until exit
  static std::set<std::string>& asked = *new std::set<std::string>;
  const std::lock_guard guard(mutex);
  return asked.insert(endpoint).second;
}

// CONFIG GET maxmemory maxmemory-policy on the client's connection, then
// the same warning as the blocking Lock's (client/eviction_check.hpp). Runs
// beside the renewals (a coroutine of its own), bounded by 300 ms; a
// refused or unanswered CONFIG means no check. Never throws.
asio::awaitable<void> check_eviction(std::shared_ptr<AsyncClientImpl> client) {
  try {
    auto answer = co_await client->command(kEvictionConfigGet, "CONFIG GET maxmemory",
                                           AsyncClientImpl::Clock::now() + kEvictionCheckTimeout);
    if (answer.ended != Ended::replied) co_return;
    const std::string message = eviction_warning(client->endpoint(), *answer.reply);
    if (!message.empty()) warn_once("eviction:" + client->endpoint(), message);
  } catch (...) {
    // NOPERM, a renamed CONFIG, an unreachable server: renewals say what matters.
  }
}

}  // namespace

struct AsyncLockImpl::Renewal {
  explicit Renewal(const asio::any_io_executor& executor) : timer(executor) {}
  asio::steady_timer timer;
  bool stopped = false;
  std::string token;
  bool with_record = false;  // the acquisition wrote a holder record: renew it too
  std::shared_ptr<LeaseSignal> lease;
  Clock::time_point hold_deadline = Clock::time_point::max();
};

void AsyncLockImpl::on_acquired(const Attempt& attempt) {
  held_ = true;
  fence_ = attempt.fence;
  lease_ = std::make_shared<LeaseSignal>(name(), options_.on_lost);
  if (options_.no_expiry) return;
  lease_->set_lease_end(add_saturating(attempt.sent_at, options_.ttl));
  if (!options_.auto_renew) return;
  auto renewal = std::make_shared<Renewal>(client_->executor());
  renewal->token = token_;
  renewal->with_record = !record_.empty();
  renewal->lease = lease_;
  if (options_.max_hold.count() > 0) renewal->hold_deadline = add_saturating(Clock::now(), options_.max_hold);
  renewal_ = renewal;
  asio::co_spawn(client_->executor(), renew_loop(shared_from_this(), std::move(renewal)), asio::detached);
  // A Cluster's nodes are not asked (its command routing follows a key).
  if (!client_->sharded() && first_eviction_check(client_->endpoint()))
    asio::co_spawn(client_->executor(), check_eviction(client_), asio::detached);
}

void AsyncLockImpl::stop_renewal() noexcept {
  if (!renewal_) return;
  renewal_->stopped = true;
  renewal_->timer.cancel();
  renewal_.reset();
}

// Renews by the renewal rule (protocol/renewal.hpp; PEXPIRE GT: never
// shortening a hand-extended lease), as the blocking watchdog does.
asio::awaitable<void> AsyncLockImpl::renew_loop(std::shared_ptr<AsyncLockImpl> self,
                                                std::shared_ptr<Renewal> renewal) {
  const auto ttl = self->options_.ttl;
  auto next = add_saturating(Clock::now(), renew_period(ttl));
  std::array<std::string_view, 3> storage;
  const std::string ttl_text = self->ttl_text_;
  while (true) {
    if (next >= renewal->hold_deadline) next = std::max(renewal->lease->lease_end(), renewal->hold_deadline);
    renewal->timer.expires_at(next);
    co_await renewal->timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    if (renewal->stopped) co_return;
    const auto now = Clock::now();
    // lost() also turns true by the clock alone: say why, once (a no-op if
    // the loss was declared already).
    if (renewal->lease->lost()) {
      if (now >= renewal->hold_deadline)
        renewal->lease->declare_lost(LossReason::max_hold, "max_hold ended renewal and the lease ran out");
      else
        renewal->lease->declare_lost(LossReason::unreachable, "renewals failed until the lease could have lapsed");
      co_return;
    }
    if (now >= renewal->hold_deadline) {
      if (now < renewal->lease->lease_end()) {
        next = renewal->lease->lease_end();
        continue;
      }
      renewal->lease->declare_lost(LossReason::max_hold, "max_hold ended renewal and the lease ran out");
      co_return;
    }
    const std::string process = subscriber_or_process_id(self->client_->subscriber_id_if_made());
    const std::array<std::string_view, 4> args{renewal->token, ttl_text, "1", process};
    // Also the record naming the process to drop if the lease lapses
    // ({K}:hs: a hand-over to us, or a waiter of ours queued behind us).
    const auto keys = self->lease_keys(storage, renewal->with_record, true);
    const std::uint64_t ticket = renewal->lease->renewal_ticket();
    const auto lease_end = renewal->lease->lease_end();
    RenewResult result = RenewResult::io_error;  // no answer by the lease's end, or a refusal (READONLY, NOPERM...)
    // A Cluster's router waits out a migration's TRYAGAIN: not past the
    // moment the lease alone must be renewed instead (protocol/renewal.hpp).
    const bool sharded = self->client_->sharded();
    const auto full_until = sharded ? std::min(lease_end, add_saturating(now, migration_fallback_after(ttl))) : lease_end;
    bool alone = false;
    try {
      auto answer = co_await self->client_->script(scripts::renew(), keys, args, "renew lock", full_until);
      if (answer.ended == Ended::replied) result = read_renew_reply(*answer.reply);
      else alone = sharded && answer.ended == Ended::deadline;
    } catch (const ReplyError& error) {
      alone = sharded && refused_by_migration(error.code());
    } catch (const std::exception&) {
    }
    if (alone && !renewal->stopped) {
      try {
        const std::array<std::string_view, 1> lease_key{keys[0]};
        const std::array<std::string_view, 3> lease_args{renewal->token, ttl_text, "1"};
        auto answer = co_await self->client_->script(scripts::renew(), lease_key, lease_args, "renew lock", lease_end);
        if (answer.ended == Ended::replied) result = read_renew_reply(*answer.reply);
      } catch (const std::exception&) {
      }
    }
    if (renewal->stopped) co_return;
    // The end as known now: an extension may have moved it during the renewal.
    const RenewalVerdict verdict =
        settle_renewal(*renewal->lease, result, now, ticket, ttl, renewal->lease->lease_end(), Clock::now());
    if (verdict.lost) {
      renewal->lease->declare_lost(verdict.reason, verdict.detail);
      co_return;
    }
    next = verdict.next_due;
  }
}

asio::awaitable<void> AsyncLockImpl::release() noexcept {
  if (!held_) co_return;
  stop_renewal();
  held_ = false;
  auto lease = lease_;  // kept alive while the release runs
  const std::string token = token_;  // a new acquisition may start meanwhile
  // With a custom token, an acquisition with it (through any lock object of
  // this client) waits for this release: if it fails, its clean-up must
  // run before that acquisition, never after it.
  struct InFlight {
    AsyncClientImpl* client = nullptr;
    std::uint64_t id = 0;
    ~InFlight() {
      if (client != nullptr) client->release_ends(id);
    }
  } in_flight;
  if (options_.token) {
    try {
      in_flight.id = client_->release_begins(keys_, token);
      in_flight.client = client_.get();
    } catch (...) {
      // No memory: the release runs untracked.
    }
  }
  try {
    co_await uncancellable();
    Port port(*this);
    const auto released = co_await core::release(port, token, *lease, Clock::time_point::max());
    last_unlock_error_ = released == core::Released::not_owned
                             ? std::make_exception_ptr(core::release_not_owned(name()))
                             : nullptr;
  } catch (...) {
    last_unlock_error_ = std::current_exception();
  }
}

void AsyncLockImpl::release_detached() noexcept {
  if (!held_) return;
  try {
    auto self = shared_from_this();
    asio::co_spawn(client_->executor(), [self]() -> asio::awaitable<void> { co_await self->release(); },
                   asio::detached);
  } catch (...) {
  }
}

asio::awaitable<void> AsyncLockImpl::extend(std::chrono::milliseconds additional, bool replace_ttl) {
  if (!held_) throw LockError("cannot extend an unlocked lock '" + name() + "'", name());
  if (options_.no_expiry) throw LockError("cannot extend lock '" + name() + "': it has no expiry", name());
  if (additional.count() <= 0) throw ConfigError("extend lock '" + name() + "': additional time must be positive");
  if (additional.count() > (1LL << 47))
    throw ConfigError("extend lock '" + name() + "': additional time exceeds Redis' limit (2^47 ms)");
  const std::string ms = std::to_string(additional.count());
  // As the renewals: the record naming this process ({K}:hs) is kept alive
  // past the longer lease while it names us (scripts::extend()).
  const std::string process = subscriber_or_process_id(client_->subscriber_id_if_made());
  const std::array<std::string_view, 5> args{token_, ms, replace_ttl ? "1" : "0", ttl_text_, process};
  std::array<std::string_view, 3> storage;
  const auto keys = lease_keys(storage, !record_.empty(), true);
  auto lease = lease_;
  // The proven end before sending: a renewal completing meanwhile may have
  // run before or after the extension on the server.
  const auto proven_end = lease->lease_end();
  const auto sent_at = Clock::now();
  // A replaced ttl may be shorter: a renewal in flight meanwhile must not
  // set the end past it (LeaseSignal::begin_shortening).
  const LeaseSignal::Shortening shortening(*lease, replace_ttl);
  // The outcome unknown (no reply, cancelled): a replaced ttl may have
  // shortened the lease to `additional` after we sent; lost() must not wait
  // for the old end (found by review, session 18).
  const auto maybe_shortened = [&] {
    if (replace_ttl && !lease->lost()) lease->set_lease_end(std::min(proven_end, add_saturating(sent_at, additional)));
  };
  AsyncClientImpl::Answer answer;
  try {
    answer = co_await client_->script(scripts::extend(), keys, args, "extend lock", Clock::time_point::max());
  } catch (const IoError&) {
    if (outcome_unknown(std::current_exception())) maybe_shortened();
    throw;
  }
  if (answer.ended != Ended::replied) {
    maybe_shortened();
    throw_cancelled();
  }
  const redisReply& reply = *answer.reply;
  if (reply.type == REDIS_REPLY_INTEGER && reply.integer == -1)
    throw LockError("cannot extend lock '" + name() + "': the key has no expiry", name());
  if (reply.type != REDIS_REPLY_INTEGER || reply.integer != 1) {
    lease->declare_lost(LossReason::taken, "the key expired or is held by another owner");
    throw LockNotOwned("cannot extend lock '" + name() + "': it is no longer owned", name());
  }
  const auto end = replace_ttl ? add_saturating(sent_at, additional) : add_saturating(proven_end, additional);
  if (!lease->lost()) lease->set_lease_end(end);
}

}  // namespace lockon::detail
