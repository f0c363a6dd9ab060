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
#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "common/diagnostics.hpp"
#include "client/error_map.hpp"
#include "lock/lease.hpp"
#include "lock/lock_calls.hpp"
#include "lock/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lock/subscriber.hpp"
#include "common/token.hpp"
#include "lock/watchdog.hpp"

namespace lockon {

using detail::ReplyPtr;
using Clock = DistributedLock::Clock;

namespace {

// How long a waiter that gives up waits for its cancel before leaving it to
// the background clean-up: a healthy server answers in well under 1 ms.
constexpr std::chrono::milliseconds kCancelGrace{25};
// Queue entries outlive any wait; emptied lists vanish by themselves.
constexpr std::string_view kQueueTtl = "600000";

void warn_publish_denied(const detail::ClientImpl& client) {
  const auto& options = client.options();
  const std::string user = options.user.empty() ? std::string("default") : options.user;
  detail::warn_once("acl:publish:" + client.endpoint(),
                    "user '" + user + "' on " + client.endpoint() +
                        " may not PUBLISH to lockon's wake-up channels ('{<key>}:wake:*'): releases cannot wake "
                        "waiters, which fall back to polling every wait_poll_interval. Grant the channels, e.g. "
                        "ACL SETUSER " + user + " &{<key prefix>*");
}

}  // namespace

class Lock::Impl {
 public:
  Impl(Client client, State& state)
      : client_(std::move(client)),
        calls_(client_.impl(), state.name),
        state_(state),
        ttl_text_(state.options.no_expiry ? "0" : std::to_string(state.options.ttl.count())) {}

  struct Attempt {
    bool acquired = false;
    bool deadline_passed = false;  // no reply before the caller's deadline
    std::uint64_t fence = 0;
    long long pttl = -2;
    Clock::time_point sent_at;     // precedes the grant: the lease starts here
    int acks = -1;                 // WAIT's reply in the same pipeline (-1: none)
  };

  bool acquire_until(Clock::time_point deadline) {
    if (!state_.held_here()) renewal_.reset();  // a parent's renewal entry, in a forked child: never touched
    if (state_.held)
      throw LockError("lock '" + state_.name + "' is already held by this object (not reentrant)", state_.name);
    if (wait_) return wait_for_turn(deadline);  // a kept queue place: continue from it
    token_ = state_.options.token ? *state_.options.token : detail::random_hex();
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

  void release() {
    if (!state_.held_here()) throw LockError("cannot release an unlocked lock '" + state_.name + "'", state_.name);
    stop_renewal();
    state_.held = false;
    const std::array<std::string_view, 1> args{state_.token};
    ReplyPtr reply;
    try {
      reply = calls_.run4(detail::scripts::release(calls_.sharded()), args, "release lock");
    } catch (const Error& e) {
      // Whether the release ran is unknown, so the lease cannot be proven
      // held to its end. The clean-up releases it if it is still ours.
      calls_.abandon(orphan_entry(state_.token), true);
      state_.lease->declare_lost(LossReason::unreachable, std::string("the release failed: ") + e.what());
      throw;
    }
    if (reply->type != REDIS_REPLY_INTEGER || reply->integer < 1) {
      state_.lease->declare_lost(LossReason::taken, "the key expired or is held by another owner");
      throw LockNotOwned("cannot release lock '" + state_.name + "': it is no longer owned", state_.name);
    }
    if (reply->integer == 2) warn_publish_denied(*client_.impl());
    state_.lease->close();
  }

  void extend(std::chrono::milliseconds additional, bool replace_ttl) {
    require_extendable("extend");
    if (additional.count() <= 0) throw ConfigError("extend lock '" + state_.name + "': additional time must be positive");
    const std::string ms = std::to_string(additional.count());
    const std::array<std::string_view, 3> args{state_.token, ms, replace_ttl ? "1" : "0"};
    const auto sent_at = Clock::now();
    check_owned(calls_.run1(detail::scripts::extend(), args, "extend lock"), "extend");
    // What we can prove: the new expiry is at least the old proven end plus
    // `additional`, or (replace) at least `additional` after we sent.
    const auto end = replace_ttl ? detail::add_saturating(sent_at, additional)
                                 : detail::add_saturating(state_.lease->lease_end(), additional);
    if (!state_.lease->lost()) state_.lease->set_lease_end(end);
  }

  void reacquire() {
    require_extendable("reacquire");
    const std::array<std::string_view, 3> args{state_.token, ttl_text_, "0"};
    const auto sent_at = Clock::now();
    check_owned(calls_.run1(detail::scripts::renew(), args, "reacquire lock"), "reacquire");
    if (!state_.lease->lost()) state_.lease->set_lease_end(detail::add_saturating(sent_at, state_.options.ttl));
  }

  bool owned() {
    if (!state_.held) return false;
    const std::array<std::string_view, 2> args{"GET", state_.name};
    const ReplyPtr reply = calls_.command(args, "GET");
    return reply->type == REDIS_REPLY_STRING && std::string_view(reply->str, reply->len) == state_.token;
  }

  bool locked() {
    const std::array<std::string_view, 2> args{"EXISTS", state_.name};
    return calls_.command(args, "EXISTS")->integer == 1;
  }

  std::optional<std::chrono::milliseconds> remaining_ttl() {
    const std::array<std::string_view, 2> args{"PTTL", state_.name};
    const long long pttl = calls_.command(args, "PTTL")->integer;
    if (pttl == -2) return std::nullopt;
    if (pttl == -1) return std::chrono::milliseconds::max();
    return std::chrono::milliseconds(pttl);
  }

  void stop_renewal() noexcept {
    if (!renewal_) return;
    detail::Watchdog::stop(*renewal_);
    renewal_.reset();
  }

  // Gives up a queue place kept between timed attempts (keep_queue_place).
  void abandon_wait() noexcept {
    if (!wait_) return;
    const std::string entry = wait_->entry;
    wait_.reset();
    calls_.cancel_now(entry, kCancelGrace);
  }

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
  };

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

  // An entry for the clean-up of an acquisition that has no queue place.
  std::string orphan_entry(const std::string& token) const {
    return "-|-|" + ttl_text_ + "|" + (state_.options.fencing ? "1" : "0") + "|" + token;
  }

  [[noreturn]] void throw_token_in_use() const {
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
  Attempt fast_attempt(Clock::time_point deadline) {
    Attempt result;
    result.sent_at = Clock::now();
    const auto until = deadline == Clock::time_point::min() ? Clock::time_point::max() : deadline;
    for (int round = 0;; ++round) {
      try {
        const int outcome = fast_request(result, until);
        if (outcome < 0) throw_token_in_use();
        result.acquired = outcome == 1;
        return result;
      } catch (const ClosedError&) {
        if (round == 0 && random_token()) continue;
        calls_.abandon(orphan_entry(token_), true);
        throw;
      } catch (const TimeoutError&) {
        calls_.abandon(orphan_entry(token_), true);
        throw;
      }
    }
  }

  // Returns 1 acquired, 0 busy or deadline passed, -1 custom token in use.
  int fast_request(Attempt& result, Clock::time_point until) {
    if (state_.options.fencing) return fenced_request(result, until);
    ReplyPtr reply;
    const std::array<std::string_view, 5> set_forever{"SET", state_.name, token_, "NX", "GET"};
    const std::array<std::string_view, 7> set_lease{"SET", state_.name, token_, "NX", "PX", ttl_text_, "GET"};
    const auto set = state_.options.no_expiry ? std::span<const std::string_view>(set_forever)
                                              : std::span<const std::string_view>(set_lease);
    if (acks_required()) {
      // WAIT in the same write, on the same connection as the SET: it covers
      // exactly this connection's writes. A SET that did not win wrote
      // nothing, and WAIT then returns at once.
      const std::array<std::span<const std::string_view>, 2> commands{set, wait_args()};
      std::vector<ReplyPtr> replies = calls_.pipeline_until(commands, "acquire lock", until);
      if (replies.empty()) return deadline_passed(result);
      detail::check_reply(*replies[1], client_.endpoint(), "WAIT for replicas");
      result.acks = static_cast<int>(replies[1]->integer);
      reply = std::move(replies[0]);
      detail::check_reply(*reply, client_.endpoint(), "acquire lock");
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

  // Fencing without a script on the hot path (a Lua call costs a quarter of
  // the floor's cycle): MULTI/EXEC makes SET, INCR and the counter's expiry
  // atomic in one round trip. INCR runs even when SET finds the lock held,
  // so fences skip numbers. A fence below kFenceFloor means the counter was
  // missing (restart, failover, expiry): one more round trip raises it to
  // the server's clock, above every fence handed out before.
  int fenced_request(Attempt& result, Clock::time_point until) {
    const std::array<std::string_view, 1> multi{"MULTI"};
    const std::array<std::string_view, 5> set_forever{"SET", state_.name, token_, "NX", "GET"};
    const std::array<std::string_view, 7> set_lease{"SET", state_.name, token_, "NX", "PX", ttl_text_, "GET"};
    const std::array<std::string_view, 2> incr{"INCR", calls_.fence_key()};
    const std::array<std::string_view, 4> expire{"PEXPIRE", calls_.fence_key(), "3600000", "NX"};
    const std::array<std::string_view, 1> exec{"EXEC"};
    const std::array<std::span<const std::string_view>, 6> all{
        multi, state_.options.no_expiry ? std::span<const std::string_view>(set_forever)
                                        : std::span<const std::string_view>(set_lease),
        incr, expire, exec, wait_args()};
    // With replica acks, WAIT follows EXEC in the same write.
    const auto commands = std::span<const std::span<const std::string_view>>(all).first(acks_required() ? 6 : 5);
    std::vector<ReplyPtr> replies = calls_.pipeline_until(commands, "acquire lock", until);
    if (replies.empty()) return deadline_passed(result);
    if (acks_required()) {
      detail::check_reply(*replies.back(), client_.endpoint(), "WAIT for replicas");
      result.acks = static_cast<int>(replies.back()->integer);
      replies.pop_back();
    }
    // Every reply was read: an error reply (OOM, READONLY, NOPERM...) can be
    // thrown without leaving the connection out of step.
    for (const ReplyPtr& reply : replies) detail::check_reply(*reply, client_.endpoint(), "acquire lock");
    const redisReply& outcome = *replies.back();
    if (outcome.type != REDIS_REPLY_ARRAY || outcome.elements != 3 || outcome.element[1]->type != REDIS_REPLY_INTEGER)
      throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.endpoint() + ": unexpected EXEC reply");
    for (std::size_t i = 0; i < outcome.elements; ++i)
      detail::check_reply(*outcome.element[i], client_.endpoint(), "acquire lock");
    const int won = outcome.element[0]->type == REDIS_REPLY_NIL ? 1 : previous_holder_is_us(*outcome.element[0]);
    if (won != 1) return won;
    result.acquired = true;
    long long fence = outcome.element[1]->integer;
    if (fence < detail::scripts::kFenceFloor) {
      const std::array<std::string_view, 1> args{token_};
      const ReplyPtr floored = calls_.run4_until(detail::scripts::floor_fence(), args, "raise the fence counter", until);
      if (!floored) {
        result.acquired = false;
        return deadline_passed(result);
      }
      if (floored->type != REDIS_REPLY_INTEGER || floored->integer == 0) {
        result.acquired = false;  // not ours any more: lost within the round trip
        return 0;
      }
      fence = floored->integer;
    }
    result.fence = static_cast<std::uint64_t>(fence);
    return 1;
  }

  // SET ... GET answered with the previous value: our own random token means
  // a first request whose reply was lost won (its lease started at
  // result.sent_at); a custom token held by someone else is misuse.
  int previous_holder_is_us(const redisReply& previous) const {
    if (previous.type != REDIS_REPLY_STRING || std::string_view(previous.str, previous.len) != token_) return 0;
    return random_token() ? 1 : -1;
  }

  int deadline_passed(Attempt& result) {
    // No answer before the deadline: the request may still win later.
    calls_.abandon(orphan_entry(token_), true);
    result.deadline_passed = true;
    return 0;
  }

  // One scripted attempt of a queued waiter (see scripts::wait_attempt).
  Attempt wait_attempt(const std::string& entry, bool enqueue, Clock::time_point deadline) {
    const std::array<std::string_view, 4> args{entry, enqueue ? "1" : "0", kQueueTtl, random_token() ? "1" : "0"};
    Attempt result;
    result.sent_at = Clock::now();
    const ReplyPtr reply = calls_.run4_until(detail::scripts::wait_attempt(calls_.sharded()), args, "acquire lock", deadline);
    if (!reply) {
      result.deadline_passed = true;
      return result;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 || reply->element[0]->type != REDIS_REPLY_INTEGER ||
        reply->element[1]->type != REDIS_REPLY_INTEGER || reply->element[2]->type != REDIS_REPLY_INTEGER)
      throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.endpoint() + ": unexpected script reply");
    if (reply->element[2]->integer == 1) warn_publish_denied(*client_.impl());
    if (reply->element[0]->integer < 0) throw_token_in_use();
    result.acquired = reply->element[0]->integer == 1;
    if (result.acquired) result.fence = static_cast<std::uint64_t>(reply->element[1]->integer);
    else result.pttl = reply->element[1]->integer;
    return result;
  }

  // Queues behind the current holder and sleeps until a release hands us
  // the lock (no round trip then), the holder's lease runs out, or the poll
  // interval passes (safety net if a message was missed).
  bool wait_for_turn(Clock::time_point deadline) {
    const bool resumed = wait_ != nullptr;
    if (!resumed) {
      auto node = client_.impl()->node_for(state_.name);
      auto& subscriber = node->subscriber();
      const std::string waiter_id = detail::random_hex(8);
      wait_ = std::make_unique<Wait>();
      wait_->node = std::move(node);
      wait_->waiter_id = waiter_id;
      wait_->token = token_;
      wait_->queued_at = Clock::now();
      wait_->entry = subscriber.id() + "|" + waiter_id + "|" + ttl_text_ + "|" + (state_.options.fencing ? "1" : "0") +
                     "|" + token_;
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
      Attempt last = wait_attempt(wait_->entry, !resumed, deadline);
      bool waited = resumed;
      while (true) {
        if (last.acquired && confirm_lease(last)) {
          note_contention(waited);
          return finish_wait(last);
        }
        waited = true;
        if (!last.deadline_passed) wait_->last = last;
        const auto now = Clock::now();
        if (last.deadline_passed || now >= deadline) return give_up();
        auto wake_at = std::min(deadline, detail::add_saturating(now, state_.options.wait_poll_interval));
        // A holder that crashed releases nothing: look again when its lease ends.
        if (last.pttl >= 0)
          wake_at = std::min(wake_at, detail::add_saturating(last.sent_at, std::chrono::milliseconds(last.pttl + 1)));
        follow_slot(wake_at);
        if (wait_->watch->wait_until(wake_at) == detail::Subscriber::Slot::Wake::handed) {
          Attempt handed = handed_attempt();
          if (confirm_lease(handed)) {
            note_contention(true);
            return finish_wait(handed);
          }
          reset_slot();  // handed, but the lease ran out while we did not run: queue again
        }
        last = wait_attempt(wait_->entry, false, deadline);
      }
    } catch (...) {
      const std::string entry = wait_->entry;
      wait_.reset();
      calls_.cancel_now(entry, kCancelGrace);
      throw;
    }
  }

  // Cluster: the key's slot moved to another master (our last attempt
  // followed a MOVED, so the map knows): listen on that master's shard
  // channel instead. Subscriber ids are the same on every node of a
  // cluster, so our queue entry stays valid. A wake-up published on the old
  // node meanwhile is not lost: the key then holds our token and the hand-
  // over record names us, which the next attempt sees.
  void follow_slot(Clock::time_point until) {
    if (!calls_.sharded()) return;
    auto node = client_.impl()->node_for(state_.name);
    if (node == wait_->node) return;
    {
      auto& slot = wait_->watch->slot();
      std::lock_guard lock(slot.mutex);
      if (slot.handed) return;  // the loop takes it first
    }
    auto& subscriber = node->subscriber();
    wait_->watch.reset();
    wait_->node = std::move(node);
    wait_->watch = std::make_unique<detail::Subscriber::Watch>(
        subscriber.watch(wait_->waiter_id, detail::wake_channel(state_.name, subscriber.id())));
    wait_->watch->wait_subscribed(until);
  }

  // The release set the key to our token before publishing; the lease
  // started after our entry was queued (not necessarily after our last
  // attempt: the wake-up may have been delayed past it).
  Attempt handed_attempt() {
    Attempt handed;
    handed.acquired = true;
    handed.fence = wait_->watch->slot().fence;
    handed.sent_at = wait_->queued_at;
    return handed;
  }

  void reset_slot() {
    auto& slot = wait_->watch->slot();
    std::lock_guard lock(slot.mutex);
    slot.handed = false;
  }

  // Deadline passed. If a hand-over raced with it, take the lock after all
  // rather than bouncing it: we own it already.
  bool give_up() {
    if (wait_->watch->wait_until(Clock::time_point::min()) == detail::Subscriber::Slot::Wake::handed) {
      Attempt handed = handed_attempt();
      if (confirm_lease(handed, Clock::now() + kCancelGrace)) return finish_wait(handed);
      reset_slot();
    }
    if (state_.options.keep_queue_place) return false;  // the next timed attempt continues from our place
    const std::string entry = wait_->entry;
    wait_.reset();
    calls_.cancel_now(entry, kCancelGrace);
    return false;
  }

  bool finish_wait(const Attempt& attempt) {
    // Before wait_ goes: a failure here leaves through wait_for_turn's
    // clean-up, which removes our queue place.
    if (acks_required()) replicate_grant();
    wait_.reset();
    return on_acquired(attempt);
  }

  bool acks_required() const noexcept { return state_.options.replica_acks.replicas > 0; }

  std::span<const std::string_view> wait_args() {
    wait_replicas_ = std::to_string(state_.options.replica_acks.replicas);
    wait_timeout_ = std::to_string(state_.options.replica_acks.timeout.count());
    wait_command_ = {"WAIT", wait_replicas_, wait_timeout_};
    return wait_command_;
  }

  // A grant that reached us by hand-over (or by a waiter's script) was
  // written by another connection — the releaser's, or a pooled one — and
  // WAIT only covers the writes of the connection it runs on. So we make a
  // write of our own first, on one connection, in one pipeline: the token
  // rewritten in place (SET ... KEEPTTL, only if it is still ours), then
  // WAIT. Once the replicas have our write they have the grant before it
  // (replication is in order).
  void replicate_grant() {
    static const detail::Script touch(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL') return 1 end "
        "return 0");
    const std::array<std::string_view, 5> eval{"EVAL", touch.body(), "1", state_.name, token_};
    const std::array<std::span<const std::string_view>, 2> commands{eval, wait_args()};
    std::vector<ReplyPtr> replies;
    try {
      replies = calls_.pipeline_until(commands, "WAIT for replicas", Clock::time_point::max());
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

  // Fewer acknowledgements than required: the grant is given back (or left
  // to the clean-up if the release fails) and the caller told how many.
  void require_acks(int acks) {
    const int required = state_.options.replica_acks.replicas;
    if (required <= 0 || acks >= required) return;
    try {
      const std::array<std::string_view, 1> args{token_};
      calls_.run4(detail::scripts::release(), args, "release an unreplicated lock");
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
  bool confirm_lease(Attempt& attempt, Clock::time_point until = Clock::time_point::max()) {
    if (state_.options.no_expiry) return true;
    const auto half = state_.options.ttl / 2;
    if (Clock::now() < detail::add_saturating(attempt.sent_at, half)) return true;
    const std::array<std::string_view, 3> args{token_, ttl_text_, "0"};
    const auto sent_at = Clock::now();
    ReplyPtr reply;
    try {
      reply = calls_.run4_until(detail::scripts::renew(), args, "confirm a late grant", until);
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

  bool on_acquired(const Attempt& attempt) {
    state_.held = true;
    state_.token = token_;
    state_.fence = attempt.fence;
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
    }
    return true;
  }

  void require_extendable(const char* what) {
    if (!state_.held) throw LockError(std::string("cannot ") + what + " an unlocked lock '" + state_.name + "'", state_.name);
    if (state_.options.no_expiry)
      throw LockError(std::string("cannot ") + what + " lock '" + state_.name + "': it has no expiry", state_.name);
  }

  void check_owned(const ReplyPtr& reply, const char* what) {
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) return;
    if (reply->type == REDIS_REPLY_INTEGER && reply->integer == -1)
      throw LockError(std::string("cannot ") + what + " lock '" + state_.name + "': the key has no expiry", state_.name);
    throw LockNotOwned(std::string("cannot ") + what + " lock '" + state_.name + "': it is no longer owned", state_.name);
  }

  Client client_;
  detail::LockCalls calls_;
  State& state_;
  const std::string ttl_text_;
  std::string token_;
  std::unique_ptr<Wait> wait_;
  Clock::time_point queue_directly_until_{};  // see queue_directly()
  std::string wait_replicas_, wait_timeout_;  // WAIT's arguments (wait_args)
  std::array<std::string_view, 3> wait_command_{};
  std::shared_ptr<detail::RenewalEntry> renewal_;
};

Lock::Lock(Client client, std::string name, LockOptions options)
    : DistributedLock(std::move(name), std::move(options)), impl_(std::make_unique<Impl>(std::move(client), state())) {}

Lock::~Lock() {
  unlock();
  impl_->abandon_wait();
  impl_->stop_renewal();
}

bool Lock::acquire_until(Clock::time_point deadline) { return impl_->acquire_until(deadline); }
void Lock::release() { impl_->release(); }
void Lock::extend(std::chrono::milliseconds additional, bool replace_ttl) { impl_->extend(additional, replace_ttl); }
void Lock::reacquire() { impl_->reacquire(); }
bool Lock::owned() { return impl_->owned(); }
bool Lock::locked() { return impl_->locked(); }
std::optional<std::chrono::milliseconds> Lock::remaining_ttl() { return impl_->remaining_ttl(); }
void Lock::abandon_wait() noexcept { impl_->abandon_wait(); }

}  // namespace lockon
