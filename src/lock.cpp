// lockon::Lock — the single-instance lock.
//
// Uncontended, a cycle is two round trips (acquire script, release script),
// like the raw SET NX PX + EVALSHA floor. Contended, a waiter subscribes to
// the lock's wake channel *before* queueing itself, so a release between its
// failed attempt and its sleep is never missed; the release wakes exactly
// the waiter at the head of the FIFO queue.
#include <algorithm>
#include <array>
#include <string>

#include "client_impl.hpp"
#include "error_map.hpp"
#include "lease.hpp"
#include "lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "script.hpp"
#include "token.hpp"
#include "watchdog.hpp"

namespace lockon {

using detail::ReplyPtr;
using Clock = DistributedLock::Clock;

class Lock::Impl {
 public:
  Impl(Client client, State& state)
      : client_(std::move(client)),
        state_(state),
        queue_key_(detail::companion_key(state.name, "q")),
        fence_key_(detail::companion_key(state.name, "fence")),
        handover_fence_key_(detail::companion_key(state.name, "hf")),
        ttl_text_(state.options.no_expiry ? "0" : std::to_string(state.options.ttl.count())) {}

  struct Attempt {
    bool acquired = false;
    std::uint64_t fence = 0;
    long long pttl = -2;
    Clock::time_point sent_at;
  };

  bool acquire_until(Clock::time_point deadline) {
    if (state_.held)
      throw LockError("lock '" + state_.name + "' is already held by this object (not reentrant)", state_.name);
    token_ = state_.options.token ? *state_.options.token : detail::random_hex();
    const Attempt first = state_.options.fencing ? fast_fenced_attempt() : fast_attempt();
    if (first.acquired) return on_acquired(first);
    if (deadline == Clock::time_point::min() || Clock::now() >= deadline) return false;
    return wait_for_turn(deadline);
  }

  void release() {
    if (!state_.held) throw LockError("cannot release an unlocked lock '" + state_.name + "'", state_.name);
    stop_renewal();
    state_.held = false;
    const std::array<std::string_view, 4> keys{state_.name, queue_key_, fence_key_, handover_fence_key_};
    const std::array<std::string_view, 1> args{state_.token};
    const ReplyPtr reply = run(detail::scripts::release(), keys, args, "release lock");
    if (reply->type != REDIS_REPLY_INTEGER || reply->integer != 1) {
      state_.lease->declare_lost(LossReason::taken, "the key expired or is held by another owner");
      throw LockNotOwned("cannot release lock '" + state_.name + "': it is no longer owned", state_.name);
    }
  }

  void extend(std::chrono::milliseconds additional, bool replace_ttl) {
    require_extendable("extend");
    if (additional.count() <= 0) throw ConfigError("extend lock '" + state_.name + "': additional time must be positive");
    const std::string ms = std::to_string(additional.count());
    const std::array<std::string_view, 1> keys{state_.name};
    const std::array<std::string_view, 3> args{state_.token, ms, replace_ttl ? "1" : "0"};
    check_owned(run(detail::scripts::extend(), keys, args, "extend lock"), "extend");
  }

  void reacquire() {
    require_extendable("reacquire");
    const std::array<std::string_view, 1> keys{state_.name};
    const std::array<std::string_view, 3> args{state_.token, ttl_text_, "0"};
    check_owned(run(detail::scripts::renew(), keys, args, "reacquire lock"), "reacquire");
  }

  bool owned() {
    if (!state_.held) return false;
    const std::array<std::string_view, 2> args{"GET", state_.name};
    const ReplyPtr reply = command(args, "GET");
    return reply->type == REDIS_REPLY_STRING && std::string_view(reply->str, reply->len) == state_.token;
  }

  bool locked() {
    const std::array<std::string_view, 2> args{"EXISTS", state_.name};
    return command(args, "EXISTS")->integer == 1;
  }

  std::optional<std::chrono::milliseconds> remaining_ttl() {
    const std::array<std::string_view, 2> args{"PTTL", state_.name};
    const long long pttl = command(args, "PTTL")->integer;
    if (pttl == -2) return std::nullopt;
    if (pttl == -1) return std::chrono::milliseconds::max();
    return std::chrono::milliseconds(pttl);
  }

  void stop_renewal() noexcept {
    if (!renewal_) return;
    detail::Watchdog::stop(*renewal_);
    renewal_.reset();
  }

 private:
  // The uncontended path costs what the raw floor costs: one plain command.
  // GET makes a key of the wrong type fail with WRONGTYPE instead of looking
  // held; a reserved hand-over makes it fail for newcomers (no barging).
  Attempt fast_attempt() {
    Attempt result;
    result.sent_at = Clock::now();
    ReplyPtr reply;
    if (state_.options.no_expiry) {
      const std::array<std::string_view, 5> args{"SET", state_.name, token_, "NX", "GET"};
      reply = command(args, "acquire lock");
    } else {
      const std::array<std::string_view, 7> args{"SET", state_.name, token_, "NX", "PX", ttl_text_, "GET"};
      reply = command(args, "acquire lock");
    }
    result.acquired = reply->type == REDIS_REPLY_NIL;
    return result;
  }

  // Fencing without a script: MULTI/EXEC makes SET and INCR atomic in one
  // round trip. INCR runs even when SET finds the lock held, so fences skip
  // numbers, but an acquisition's fence is always above every earlier one.
  Attempt fast_fenced_attempt() {
    Attempt result;
    result.sent_at = Clock::now();
    auto connection = client_.impl()->pool().borrow();
    connection->ensure_connected();
    const std::array<std::string_view, 1> multi{"MULTI"};
    const std::array<std::string_view, 2> incr{"INCR", fence_key_};
    const std::array<std::string_view, 1> exec{"EXEC"};
    connection->append(multi);
    if (state_.options.no_expiry) {
      const std::array<std::string_view, 5> set{"SET", state_.name, token_, "NX", "GET"};
      connection->append(set);
    } else {
      const std::array<std::string_view, 7> set{"SET", state_.name, token_, "NX", "PX", ttl_text_, "GET"};
      connection->append(set);
    }
    connection->append(incr);
    connection->append(exec);
    for (int queued = 0; queued < 3; ++queued) {
      const ReplyPtr reply = connection->read_reply("acquire lock");
      detail::check_reply(*reply, client_.impl()->endpoint(), "acquire lock");
    }
    const ReplyPtr reply = connection->read_reply("acquire lock");
    detail::check_reply(*reply, client_.impl()->endpoint(), "acquire lock");
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2)
      throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.impl()->endpoint() + ": unexpected EXEC reply");
    detail::check_reply(*reply->element[0], client_.impl()->endpoint(), "acquire lock");
    detail::check_reply(*reply->element[1], client_.impl()->endpoint(), "acquire lock (fence counter)");
    result.acquired = reply->element[0]->type == REDIS_REPLY_NIL;
    if (result.acquired) result.fence = static_cast<std::uint64_t>(reply->element[1]->integer);
    return result;
  }

  // One scripted attempt of a queued waiter (see scripts::wait_attempt).
  Attempt wait_attempt(std::string_view entry, bool enqueue) {
    const std::array<std::string_view, 4> keys{state_.name, queue_key_, fence_key_, handover_fence_key_};
    const std::array<std::string_view, 3> args{entry, enqueue ? "1" : "0", kQueueTtl};
    Attempt result;
    result.sent_at = Clock::now();
    const ReplyPtr reply = run(detail::scripts::wait_attempt(), keys, args, "acquire lock");
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 || reply->element[0]->type != REDIS_REPLY_INTEGER ||
        reply->element[1]->type != REDIS_REPLY_INTEGER)
      throw ProtocolError("acquire lock '" + state_.name + "' on " + client_.impl()->endpoint() + ": unexpected script reply");
    result.acquired = reply->element[0]->integer == 1;
    if (result.acquired) result.fence = static_cast<std::uint64_t>(reply->element[1]->integer);
    else result.pttl = reply->element[1]->integer;
    return result;
  }

  // Queues behind the current holder and sleeps until a release hands us
  // the lock (no round trip then), the holder's lease runs out, or the poll
  // interval passes (safety net if a message was missed).
  bool wait_for_turn(Clock::time_point deadline) {
    auto& subscriber = client_.impl()->subscriber();
    const std::string waiter_id = detail::random_hex(8);
    const std::string entry = subscriber.id() + "|" + waiter_id + "|" + ttl_text_ + "|" +
                              (state_.options.fencing ? "1" : "0") + "|" + token_;
    const auto poll = state_.options.wait_poll_interval;
    auto watch = subscriber.watch(waiter_id, detail::wake_channel(state_.name, subscriber.id()));
    // Subscribed before queueing: a hand-over can't precede our ability to
    // hear about it. Bounded, so a dead subscriber only costs polling.
    watch.wait_subscribed(std::min(deadline, detail::add_saturating(Clock::now(), poll)));
    try {
      Attempt last = wait_attempt(entry, true);
      while (true) {
        if (last.acquired) return on_acquired(last);
        const auto now = Clock::now();
        if (now >= deadline) return give_up(entry, watch, last.sent_at);
        auto wake_at = std::min(deadline, detail::add_saturating(now, poll));
        // A holder that crashed releases nothing: look again when its lease ends.
        if (last.pttl >= 0)
          wake_at = std::min(wake_at, detail::add_saturating(last.sent_at, std::chrono::milliseconds(last.pttl + 1)));
        if (watch.wait_until(wake_at) == detail::Subscriber::Slot::Wake::handed) {
          // The release set the key to our token before publishing.
          Attempt handed;
          handed.acquired = true;
          handed.fence = watch.slot().fence;
          handed.sent_at = last.sent_at;
          return on_acquired(handed);
        }
        last = wait_attempt(entry, false);
      }
    } catch (...) {
      cancel_wait(entry);
      throw;
    }
  }

  // Deadline passed. If a hand-over raced with it, take the lock after all
  // rather than bouncing it: we own it already.
  bool give_up(const std::string& entry, detail::Subscriber::Watch& watch, Clock::time_point last_sent_at) {
    if (watch.wait_until(Clock::time_point::min()) == detail::Subscriber::Slot::Wake::handed) {
      Attempt handed;
      handed.acquired = true;
      handed.fence = watch.slot().fence;
      // Handed over after our last attempt was sent: its send time is a
      // safe (early) lease start, and cannot underflow like now - poll.
      handed.sent_at = last_sent_at;
      return on_acquired(handed);
    }
    cancel_wait(entry);
    return false;
  }

  void cancel_wait(const std::string& entry) noexcept {
    try {
      const std::array<std::string_view, 4> keys{state_.name, queue_key_, fence_key_, handover_fence_key_};
      const std::array<std::string_view, 1> args{entry};
      run(detail::scripts::cancel_wait(), keys, args, "cancel wait");
    } catch (...) {
      // Best effort: a stale entry is skipped once our process stops
      // listening, and the queue key expires on its own.
    }
  }

  bool on_acquired(const Attempt& attempt) {
    state_.held = true;
    state_.token = token_;
    state_.fence = attempt.fence;
    state_.begin_lease();
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

  ReplyPtr run(const detail::Script& script, std::span<const std::string_view> keys,
               std::span<const std::string_view> args, std::string_view operation) {
    auto connection = client_.impl()->pool().borrow();
    ReplyPtr reply = detail::eval(*connection, script, keys, args, operation);
    detail::check_reply(*reply, client_.impl()->endpoint(), operation);
    return reply;
  }

  ReplyPtr command(std::span<const std::string_view> args, std::string_view operation) {
    auto connection = client_.impl()->pool().borrow();
    ReplyPtr reply = connection->command(args, operation);
    detail::check_reply(*reply, client_.impl()->endpoint(), operation);
    return reply;
  }

  Client client_;
  State& state_;
  // Queue keys outlive any wait; emptied lists vanish by themselves.
  static constexpr std::string_view kQueueTtl = "600000";

  const std::string queue_key_;
  const std::string fence_key_;
  const std::string handover_fence_key_;
  const std::string ttl_text_;
  std::string token_;
  std::shared_ptr<detail::RenewalEntry> renewal_;
};

Lock::Lock(Client client, std::string name, LockOptions options)
    : DistributedLock(std::move(name), std::move(options)), impl_(std::make_unique<Impl>(std::move(client), state())) {}

Lock::~Lock() {
  unlock();
  impl_->stop_renewal();
}

bool Lock::acquire_until(Clock::time_point deadline) { return impl_->acquire_until(deadline); }
void Lock::release() { impl_->release(); }
void Lock::extend(std::chrono::milliseconds additional, bool replace_ttl) { impl_->extend(additional, replace_ttl); }
void Lock::reacquire() { impl_->reacquire(); }
bool Lock::owned() { return impl_->owned(); }
bool Lock::locked() { return impl_->locked(); }
std::optional<std::chrono::milliseconds> Lock::remaining_ttl() { return impl_->remaining_ttl(); }

}  // namespace lockon
