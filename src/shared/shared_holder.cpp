#include "common/test_hooks.hpp"
#include "shared/shared_holder.hpp"

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <utility>

#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "client/script.hpp"
#include "common/diagnostics.hpp"
#include "common/fork.hpp"
#include "common/grace.hpp"
#include "common/token.hpp"
#include "protocol/lease.hpp"
#include "lock/lock_calls.hpp"
#include "protocol/lock_scripts.hpp"
#include "protocol/renewal.hpp"
#include "lock/orphans.hpp"
#include "lock/subscriber.hpp"
#include "lock/wake_proof.hpp"
#include "lock/watchdog.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "shared/shared_scripts.hpp"
#include "protocol/queue_entry.hpp"

namespace lockon::detail {

namespace {

using detail::kCancelGrace;  // a waiter's cancel, then retried in the background (cancel_now)
constexpr long long kMaxTtlMs = 1LL << 40;

// Runs `script` on the node serving `name` with the keys every shared script
// takes (SharedHolder::keys_); null when `until` passed first (the outcome
// is then unknown). Each read (the EVALSHA's, and the EVAL's after a
// NOSCRIPT) waits the socket timeout or until `until`, whichever is first.
ReplyPtr run_script(ClientImpl& client, const std::string& name, const std::array<std::string, 3>& key_names,
                    const Script& script, std::span<const std::string_view> args, std::string_view operation,
                    std::chrono::steady_clock::time_point until) {
  const std::array<std::string_view, 3> keys{key_names[0], key_names[1], key_names[2]};
  std::string endpoint;
  ReplyPtr reply = routed_call(client, name, until, [&](Connection& connection, Node& node) -> ReplyPtr {
    endpoint = node.endpoint();
    if (!connection.ensure_connected_by(until)) return nullptr;  // the deadline passed while connecting
    return eval_bounded(connection, script, keys, args, operation, until);
  });
  if (reply) check_reply(*reply, endpoint, operation);
  return reply;
}

}  // namespace

struct SharedHolder::Attempt {
  bool acquired = false;
  bool deadline_passed = false;
  long long wait_ms = -1;  // until the earliest holder's lease ends
  Clock::time_point sent_at;
};

SharedHolder::SharedHolder(Client client, std::string name, SharedLeaseOptions options, char kind, long long limit,
                           const char* what)
    : client_(std::move(client)),
      name_(std::move(name)),
      options_(std::move(options)),
      kind_(kind),
      limit_text_(std::to_string(limit)),
      what_(what) {
  validate_name(name_, what_);
  if (options_.ttl.count() <= 0 || options_.ttl.count() > kMaxTtlMs)
    throw ConfigError(std::string(what_) + " '" + name_ + "': ttl must be > 0 and <= 2^40 ms");
  if (options_.wait_poll_interval.count() <= 0)
    throw ConfigError(std::string(what_) + " '" + name_ + "': wait_poll_interval must be > 0");
  ttl_text_ = std::to_string(options_.ttl.count());
  keys_ = {companion_key(name_, "sh"), companion_key(name_, "sq"), companion_key(name_, "shs")};
  wake_prefix_ = companion_key(name_, "wake:");
  sharded_ = sharded_wake(*client_.impl());
}

SharedHolder::~SharedHolder() {
  unlock();
  stop_renewal();
}

bool SharedHolder::held() noexcept {
  if (held_ && generation_ != fork_generation()) held_ = false;  // the parent's holding, seen in a forked child
  return held_;
}

bool SharedHolder::lost() const noexcept { return lease_ && lease_->lost(); }

std::stop_token SharedHolder::lost_token() const noexcept { return lease_ ? lease_->token() : std::stop_token(); }

std::string SharedHolder::orphan_entry() const {
  // A caller-chosen token's direct grant is recorded under this process's
  // id (shared_scripts::attempt); a random one names its process itself.
  const std::string sid = fixed_token_.empty() ? std::string(kNotQueued) : subscriber_or_process_id(std::string());
  return queue_entry(sid, kNotQueued, ttl_text_, std::string_view(&kind_, 1), token_);
}

SharedHolder::Attempt SharedHolder::attempt(const std::string& entry, const char* mode, Clock::time_point until) {
  const std::array<std::string_view, 6> args{wake_prefix_, limit_text_, entry, mode, kQueueTtlMs,
                                             fixed_token_.empty() ? "0" : "1"};
  Attempt result;
  result.sent_at = Clock::now();
  const ReplyPtr reply = run_script(*client_.impl(), name_, keys_,
                                    shared_scripts::attempt(sharded_), args, "acquire", until);
  if (!reply) {
    result.deadline_passed = true;
    return result;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 || reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[1]->type != REDIS_REPLY_INTEGER)
    throw ProtocolError(std::string("acquire ") + what_ + " '" + name_ + "' on " + client_.endpoint() +
                        ": unexpected script reply");
  result.acquired = reply->element[0]->integer == 1;
  result.wait_ms = reply->element[1]->integer;
  return result;
}

bool SharedHolder::acquire_until(Clock::time_point deadline) {
  if (!held()) stop_renewal();
  if (held_) throw LockError(std::string(what_) + " '" + name_ + "' is already held by this object", name_);
  // Ending in this process's nonce: a waiter of this process queueing
  // behind it tells it is ours (shared_scripts::attempt).
  if (fixed_token_.empty()) {
    assign_lock_token(token_);
  } else {
    token_ = fixed_token_;
    // As a Lock's (Orphans::forget): an earlier attempt's clean-up would
    // remove this share, whose member is the same token.
    if (!Orphans::instance().forget(*client_.impl(), name_, token_, deadline)) return false;
  }
  const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
  Attempt first;
  try {
    first = attempt(orphan_entry(), "0", until);
  } catch (const IoError&) {
    // It may have been granted (a lost reply, a timeout, an unreadable
    // reply: ProtocolError was left out; found by review, session 18).
    if (outcome_unknown(std::current_exception())) cancel_now(orphan_entry(), true);
    throw;
  }
  if (first.acquired) return on_acquired(first.sent_at);
  if (first.deadline_passed) {
    cancel_now(orphan_entry(), true);  // sent, its reply unread: it may still run
    return false;
  }
  if (deadline == Clock::time_point::min() || Clock::now() >= deadline) return false;
  return wait_for_turn(deadline);
}

bool SharedHolder::wait_for_turn(Clock::time_point deadline) {
  auto node = client_.impl()->node_for(name_);  // kept alive while we listen on its subscriber
  auto& subscriber = subscriber_of(*node);
  const std::string waiter_id = random_hex(8);
  std::string entry = queue_entry(subscriber.id(), waiter_id, ttl_text_, std::string_view(&kind_, 1), token_);
  std::optional<Subscriber::Watch> watch;
  watch.emplace(subscriber.watch(waiter_id, wake_channel(name_, subscriber.id())));
  // The watch's connection, sampled before each attempt from our place: a
  // hand-over message is proof only from it (trusted below).
  std::uint64_t heard = 0;
  const auto attempt_in_line = [&](const char* mode) {
    heard = watch->connection_generation();
    return attempt(entry, mode, deadline);
  };
  // Subscribed before queueing: no hand-over can precede our ability to hear
  // it. Bounded: a dead subscriber only costs polling.
  watch->wait_subscribed(std::min(deadline, add_saturating(Clock::now(), options_.wait_poll_interval)));
  // Past the deadline nothing is sent (core/wait_attempt.hpp says why); nothing is queued yet.
  if (Clock::now() >= deadline) return false;
  // Sent before our entry is queued, so before any hand-over to it: a lease
  // handed to us is proven from here.
  const auto queued_at = Clock::now();
  const auto handed_in_time = [&] { return Clock::now() < add_saturating(queued_at, options_.ttl / 2); };
  // Cluster: the name's slot moved to another master (our last attempt
  // followed the MOVED, so the map knows): listen on that master's shard
  // channel instead, as Lock::Impl::follow_slot does. Otherwise a release
  // there publishes our hand-over to nobody, and the script, taking us for
  // gone, drops our queue place. Subscriber ids are the same on every node of
  // a cluster, so our entry stays valid.
  //
  // Elsewhere (Sentinel: a failover) our entry names a subscriber on the old
  // master, whose wake-ups a release on the new one counts unheard (every
  // grant withdrawn, our entry queued again at the tail, forever) and a
  // demoted old master delivers all the same (see trusted()): the wait
  // moves to the new master's subscriber, its entry renamed in place
  // (scripts::move_wait: same waiter id and token, so a share handed to the
  // old entry is still ours, and the next attempt finds it). Not by a
  // cancel: a cancel retried in the background would drop our share,
  // granted meanwhile to the new entry under the same member. If the move's
  // outcome is unknown the old entry may stay queued, and a hand-over
  // reaching it would grant our member, count it unheard and ZREM it —
  // dropping a share we may hold by then: both entries are cancelled and
  // the acquisition fails (the exception goes to the caller).
  //
  // The move is bounded by the caller's deadline, as the attempts are: with
  // only the socket timeout, a new master slow to answer held a timed wait
  // up to that long past its deadline (test_sentinel_move_deadline.cpp).
  // False when the deadline passed first: the move's outcome is unknown,
  // and it may still run after anything we send next (it went out on a
  // connection since closed). The old entry is cancelled here, then the
  // caller cancels the new one: a move that runs after the first cancel
  // finds nothing to rename. Both as late requests (swept again in the
  // background, cancel_now): a cancel not confirmed in its grace may run
  // after the move and the other cancel.
  const auto follow_slot = [&](Clock::time_point until) -> bool {
    std::shared_ptr<Node> serving;
    try {
      // Outside a cluster the cached node: resolves nothing here.
      serving = sharded_ ? client_.impl()->node_for(name_) : client_.impl()->node_for(name_, Clock::now());
    } catch (...) {
      if (sharded_) throw;
      return true;  // no master known now: the next attempt reports it
    }
    if (!serving || serving == node) return true;
    {
      std::lock_guard lock(watch->slot().mutex);
      if (watch->slot().handed) return true;  // the loop takes it first
    }
    if (!sharded_ && !detail::test_hooks::move_waits_after_failover.load(std::memory_order_relaxed)) return true;
    auto& now_subscriber = subscriber_of(*serving);
    watch.reset();
    node = std::move(serving);
    watch.emplace(now_subscriber.watch(waiter_id, wake_channel(name_, now_subscriber.id())));
    heard = 0;  // nothing heard is trusted before the next attempt
    watch->wait_subscribed(until);
    if (sharded_) return true;  // subscriber ids are the same on every node: the entry stays valid
    const std::string old_entry = entry;
    entry = entry_for_subscriber(old_entry, now_subscriber.id());
    ReplyPtr moved;
    try {
      const std::array<std::string_view, 2> args{old_entry, entry};
      moved = run_script(*client_.impl(), name_, keys_, scripts::move_wait(), args, "move wait", deadline);
    } catch (...) {
      cancel_now(old_entry, outcome_unknown(std::current_exception()));
      throw;  // the catch below cancels the new entry
    }
    if (moved) return true;
    cancel_now(old_entry, true);
    return false;
  };
  // Whether the hand-over message proves a share (lock/wake_proof.hpp).
  const auto trusted = [&] {
    return wake_proves_grant(*watch, heard, *client_.impl(), name_, node, sharded_);
  };
  try {
    Attempt last = attempt_in_line("1");
    while (true) {
      if (last.acquired) return on_acquired(last.sent_at);
      const auto now = Clock::now();
      if (last.deadline_passed || now >= deadline) {
        // A hand-over that raced with the deadline is taken rather than bounced.
        if (watch->wait_until(Clock::time_point::min()) == Subscriber::Slot::Wake::handed && handed_in_time() &&
            trusted())
          return on_acquired(queued_at);
        cancel_now(entry, last.deadline_passed);
        return false;
      }
      auto wake_at = std::min(deadline, add_saturating(now, options_.wait_poll_interval));
      // A crashed holder releases nothing: look again when its lease ends.
      if (last.wait_ms >= 0)
        wake_at = std::min(wake_at, add_saturating(last.sent_at, std::chrono::milliseconds(last.wait_ms + 1)));
      if (!follow_slot(wake_at)) {
        // No hand-over to take: nothing heard since the move is trusted.
        cancel_now(entry, true);
        return false;
      }
      if (watch->wait_until(wake_at) == Subscriber::Slot::Wake::handed) {
        if (handed_in_time() && trusted()) return on_acquired(queued_at);
        // Woken too late to prove half a lease, or by a message that is no
        // proof (trusted): the next attempt confirms (and restarts) the
        // share if it is still ours.
        std::lock_guard lock(watch->slot().mutex);
        watch->slot().handed = false;
      }
      // Past the deadline nothing more is sent: its reply could not be read
      // in time (and an unread reply breaks the pooled connection and leaves
      // an attempt that may run after our cancel). The top of the loop takes
      // a hand-over that raced with the deadline, else cancels.
      if (Clock::now() >= deadline) {
        last = Attempt{};
        continue;
      }
      last = attempt_in_line("r");
    }
  } catch (...) {
    cancel_now(entry, outcome_unknown(std::current_exception()));
    throw;
  }
}

bool SharedHolder::on_acquired(Clock::time_point lease_from) {
  held_ = true;
  generation_ = fork_generation();
  lease_ = std::make_shared<LeaseSignal>(name_, options_.on_lost);
  lease_->set_lease_end(add_saturating(lease_from, options_.ttl));
  if (!options_.auto_renew) {
    // Not renewed, the lease simply ends: the watchdog signals that end
    // (stop token, on_lost) as it signals a renewal's failure.
    renewal_ = Watchdog::instance().watch_lease_end(name_, lease_);
    return true;
  }
  auto entry = std::make_shared<RenewalEntry>();
  entry->name = name_;
  entry->ttl = options_.ttl;
  entry->signal = lease_;
  // No `client`: renewed one by one on the lane of self-renewing entries,
  // with this script (the lanes' pipelines renew plain lock keys only).
  entry->renew = [client = client_.impl(), name = name_, keys = keys_,
                  wake = wake_prefix_, limit = limit_text_, member = std::string(1, kind_) + ":" + token_,
                  ttl = ttl_text_, sharded = sharded_]() -> RenewResult {
    const std::array<std::string_view, 4> args{wake, limit, member, ttl};
    const ReplyPtr reply = run_script(*client, name, keys, shared_scripts::renew(sharded), args,
                                      "renew", Clock::time_point::max());
    return reply->type == REDIS_REPLY_INTEGER && reply->integer == 1 ? RenewResult::renewed : RenewResult::not_owned;
  };
  // A lane of its own per server (not the one Redlock entries share): a
  // stalled server delays only the shares it serves.
  try {
    entry->lane = "shared:" + client_.impl()->node_for(name_)->endpoint();
  } catch (...) {
    entry->lane = "shared:" + client_.endpoint();
  }
  const auto now = Clock::now();
  entry->next_due = add_saturating(now, renew_period(options_.ttl));
  entry->lease_expires = add_saturating(lease_from, options_.ttl);
  renewal_ = entry;
  Watchdog::instance().add(std::move(entry));
  return true;
}

void SharedHolder::stop_renewal() noexcept {
  if (!renewal_) return;
  Watchdog::stop(*renewal_);
  renewal_.reset();
}

void SharedHolder::cancel_now(const std::string& entry, bool late_request) noexcept {
  try {
    const std::array<std::string_view, 3> args{wake_prefix_, limit_text_, entry};
    if (run_script(*client_.impl(), name_, keys_, shared_scripts::cancel(sharded_), args,
                   "cancel wait", Clock::now() + kCancelGrace) &&
        !late_request)
      return;
  } catch (...) {
  }
  abandon(entry);
}

void SharedHolder::abandon(const std::string& entry) noexcept {
  // A release not confirmed: the share would block the name or a permit
  // until its TTL. A cancel not confirmed: the entry may still be queued,
  // and a hand-over reaching it while this process listens on the name
  // (another waiter) would give it a share nobody holds for a whole TTL. Retried in the background
  // until it succeeds, like a Lock's abandoned wait (lock/orphans.hpp).
  // Confirmed, but a request of ours whose reply was never read may run
  // after it (it went out on a connection since closed; the server serves
  // connections in no set order) and take a share or queue the entry
  // again: swept again later all the same (found by review, session 20:
  // a permit held by nobody for its TTL).
  try {
    Orphan orphan;
    orphan.client = client_.impl();
    orphan.keys[0] = name_;
    orphan.unknown_outcome = true;
    orphan.token = token_;
    orphan.clean = [client = client_.impl(), name = name_, keys = keys_,
                    args = std::array<std::string, 3>{wake_prefix_, limit_text_, entry},
                    sharded = sharded_](Clock::time_point deadline) {
      const std::array<std::string_view, 3> views{args[0], args[1], args[2]};
      return run_script(*client, name, keys, shared_scripts::cancel(sharded), views, "cancel wait", deadline) !=
             nullptr;
    };
    Orphans::instance().adopt(std::move(orphan));
  } catch (...) {
    // Out of memory: the entry and any share handed to it end by their TTLs.
  }
}

void SharedHolder::release() {
  if (!held()) throw LockError(std::string("cannot release ") + what_ + " '" + name_ + "': not held", name_);
  stop_renewal();
  held_ = false;
  const std::string member = std::string(1, kind_) + ":" + token_;
  const std::array<std::string_view, 3> args{wake_prefix_, limit_text_, member};
  ReplyPtr reply;
  try {
    // Redirections (MOVED, ASK, TRYAGAIN during a slot migration) are
    // followed for the socket timeout, at least a second (routed.hpp).
    reply = run_script(*client_.impl(), name_, keys_, shared_scripts::release(sharded_), args,
                       "release", Clock::time_point::max());
  } catch (const Error& e) {
    // Not run (a migration or a failover outlasted that: ServerBusyError),
    // or its outcome unknown (IoError): as a Lock's, the release is retried
    // in the background until it runs (the cancel script of an entry that
    // is not queued removes the share and hands its room on), rather than
    // the share blocking the name or a permit until its TTL (issue 33).
    // The lease cannot be proven held to its end: declared lost.
    abandon(orphan_entry());
    lease_->declare_lost(LossReason::unreachable, std::string("the release failed: ") + e.what());
    throw;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 || reply->element[0]->type != REDIS_REPLY_INTEGER ||
      reply->element[0]->integer != 1) {
    lease_->declare_lost(LossReason::taken, "the lease had ended before the release");
    throw LockNotOwned(std::string("cannot release ") + what_ + " '" + name_ + "': the lease had ended", name_);
  }
  lease_->close();
}

std::pair<long long, long long> SharedHolder::probe() {
  static const Script script(
      "local t = redis.call('TIME')\n"
      "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "local live = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%.0f', now), '+inf')\n"
      "local score = redis.call('ZSCORE', KEYS[1], ARGV[1])\n"
      "if score and tonumber(score) > now then return {tonumber(score) - now, live} end\n"
      "return {-2, live}\n");
  const std::string member = held() ? std::string(1, kind_) + ":" + token_ : std::string("-");
  const std::array<std::string_view, 1> args{member};
  const ReplyPtr reply = run_script(*client_.impl(), name_, keys_, script, args, "inspect",
                                    Clock::time_point::max());
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
    throw ProtocolError(std::string("inspect ") + what_ + " '" + name_ + "' on " + client_.endpoint() +
                        ": unexpected script reply");
  return {reply->element[0]->integer, reply->element[1]->integer};
}

void SharedHolder::unlock() noexcept {
  if (!held()) return;
  try {
    release();
    last_unlock_error_ = nullptr;
  } catch (...) {
    last_unlock_error_ = std::current_exception();
  }
}

}  // namespace lockon::detail
