// lockon::Redlock — the quorum lock over N independent masters. The node
// layer (fan-out, scripts, events) is in redlock_nodes.*; this file is the
// algorithm. Choices are documented in lockon/redlock.hpp and docs/redlock.md.
#include "lockon/redlock.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <random>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "protocol/lease.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "redlock/redlock_lease.hpp"
#include "redlock/redlock_nodes.hpp"
#include "common/token.hpp"
#include "lock/watchdog.hpp"

namespace lockon {

using Clock = DistributedLock::Clock;
using detail::NodeReply;
using detail::RedlockLease;
using detail::RedlockNodes;
using detail::Tally;
using detail::Verdict;
using std::chrono::milliseconds;

namespace {

std::chrono::microseconds micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d);
}

}  // namespace

class Redlock::Impl {
 public:
  /// Consecutive attempts that could not win a majority because of failing
  /// nodes (or won it too late) before acquire gives up with QuorumError: one
  /// blip (a slow reply, a reconnect) is retried, an outage is reported.
  static constexpr int kInfrastructureAttempts = 3;
  /// Fence counters expire an hour after their last write: a counter per
  /// lock name must not live forever, and an expired (or emptied) counter
  /// restarts at the server's clock, above every earlier fence.
  static constexpr std::string_view kFenceCounterTtlMs = "3600000";

  Impl(std::vector<Client> clients, State& state, RedlockOptions options) : state_(state), options_(std::move(options)) {
    const LockOptions& lock = state.options;
    if (lock.no_expiry)
      throw ConfigError("redlock '" + state.name + "': no_expiry is not supported (the algorithm needs expiring keys)");
    if (!(options_.drift_factor >= 0.0 && options_.drift_factor < 0.5))
      throw ConfigError("redlock '" + state.name + "': drift_factor must be in [0, 0.5)");
    if (options_.per_node_timeout.count() < 0)
      throw ConfigError("redlock '" + state.name + "': per_node_timeout must not be negative");
    if (options_.per_node_timeout > kMaxTimeout)  // start + timeout must not overflow the clock
      throw ConfigError("redlock '" + state.name + "': per_node_timeout over " + std::to_string(kMaxTimeout.count()) +
                        " ms");
    if (options_.retry_delay_min.count() < 0 || options_.retry_delay_max < options_.retry_delay_min ||
        options_.retry_delay_max.count() <= 0)
      throw ConfigError("redlock '" + state.name + "': retry delays must satisfy 0 <= min <= max, max > 0");
    const milliseconds timeout = options_.per_node_timeout.count() > 0 ? options_.per_node_timeout
                                                                       : detail::auto_per_node_timeout(lock.ttl);
    lease_ = std::make_shared<RedlockLease>();
    lease_->nodes = std::make_shared<const RedlockNodes>(std::move(clients), state.name, timeout, options_.on_node_event);
    lease_->name = state.name;
    lease_->fence_key = detail::companion_key(state.name, "fence");
    lease_->ttl = lock.ttl;
    lease_->drift_factor = options_.drift_factor;
    ttl_text_ = std::to_string(lock.ttl.count());
    if (options_.check_nodes) probe();
  }

  const RedlockNodes& nodes() const noexcept { return *lease_->nodes; }
  const RedlockOptions& options() const noexcept { return options_; }
  Clock::time_point validity_deadline() const noexcept {
    return state_.held ? lease_->validity_deadline() : Clock::time_point::min();
  }

  bool acquire_until(Clock::time_point deadline) {
    if (state_.held)
      throw LockError("lock '" + state_.name + "' is already held by this object (not reentrant)", state_.name);
    const bool single = deadline == Clock::time_point::min();
    int infrastructure_failures = 0;
    while (true) {
      const std::string token = state_.options.token ? *state_.options.token : detail::random_hex();
      Attempt attempt = try_once(token, single ? Clock::time_point::max() : deadline);
      if (attempt.failure == Failure::none) return on_acquired(token, attempt);
      const auto now = Clock::now();
      if (attempt.failure == Failure::busy) {
        infrastructure_failures = 0;
        if (single || now >= deadline) return false;
      } else if (single || now >= deadline || ++infrastructure_failures >= kInfrastructureAttempts) {
        throw QuorumError(attempt.why, state_.name);
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(jitter(), deadline - now));
      // A sleep cut at the deadline sends nothing more: an attempt begun
      // there could not be used, and its grants would be cleaned up or
      // left to their TTL (RedlockDeadlines.NoAttemptIsSentWhenTheRetry...).
      if (Clock::now() >= deadline) {
        if (attempt.failure == Failure::busy) return false;
        throw QuorumError(attempt.why, state_.name);
      }
    }
  }

  void release() {
    if (!state_.held) throw LockError("cannot release an unlocked lock '" + state_.name + "'", state_.name);
    stop_renewal();
    state_.held = false;
    // Returns once a majority confirmed: unlock never waits on a frozen
    // minority (their keys expire by their TTL).
    const Tally tally = lease_->release(state_.token, Clock::time_point::max(), true);
    lease_->set_deadline(Clock::time_point::min());
    if (tally.ok >= nodes().quorum()) {
      state_.lease->close();  // ended by us: lost() must not turn true later
      return;
    }
    if (tally.refused > nodes().size() - nodes().quorum()) {
      state_.lease->declare_lost(LossReason::taken, "release: the key expired or is held by another owner on a majority");
      throw LockNotOwned("cannot release lock '" + state_.name + "': it is no longer owned by a majority (" +
                             tally.summary(nodes()) + ")",
                         state_.name);
    }
    // Not confirmed: whether we still held it, and when the keys go, is
    // unknown. A release that cannot be confirmed is reported as a loss, not
    // as a quiet success (the caller may have relied on holding it to here).
    const std::string what = "release of lock '" + state_.name + "' confirmed on " + tally.summary(nodes()) +
                             "; the keys expire by their TTL";
    state_.lease->declare_lost(LossReason::unreachable, what);
    throw QuorumError(what, state_.name);
  }

  void extend(milliseconds additional, bool replace_ttl) {
    if (additional.count() <= 0) throw ConfigError("extend lock '" + state_.name + "': additional time must be positive");
    if (additional.count() > (1LL << 47))
      throw ConfigError("extend lock '" + state_.name + "': additional time exceeds Redis' limit (2^47 ms)");
    extend_as(replace_ttl ? RedlockLease::ExtendMode::set : RedlockLease::ExtendMode::add, additional, "extend");
  }

  void reacquire() { extend_as(RedlockLease::ExtendMode::set, state_.options.ttl, "reacquire"); }

  bool owned() {
    if (!state_.held) return false;
    const std::array<std::string_view, 2> args{"GET", state_.name};
    auto replies = nodes().command(args, "redlock GET");
    const std::string& token = state_.token;
    const Tally tally = detail::settle(nodes(), replies, NodeOperation::check, token, [&](std::size_t, const redisReply& r) {
      if (r.type == REDIS_REPLY_STRING && std::string_view(r.str, r.len) == token) return Verdict{NodeOutcome::ok, "owned"};
      if (r.type == REDIS_REPLY_NIL || r.type == REDIS_REPLY_STRING) return Verdict{NodeOutcome::refused, "not owned"};
      return detail::unexpected_reply();
    });
    return decide(tally, "owned");
  }

  bool locked() {
    const std::array<std::string_view, 2> args{"EXISTS", state_.name};
    auto replies = nodes().command(args, "redlock EXISTS");
    const Tally tally = detail::settle(nodes(), replies, NodeOperation::check, {}, [](std::size_t, const redisReply& r) {
      if (r.type != REDIS_REPLY_INTEGER) return detail::unexpected_reply();
      return r.integer == 1 ? Verdict{NodeOutcome::ok, "key exists"} : Verdict{NodeOutcome::refused, "no key"};
    });
    return decide(tally, "locked");
  }

  std::optional<milliseconds> remaining_ttl() {
    const std::array<std::string_view, 2> args{"PTTL", state_.name};
    auto replies = nodes().command(args, "redlock PTTL");
    std::vector<long long> ttls;
    const Tally tally = detail::settle(nodes(), replies, NodeOperation::check, {}, [&](std::size_t, const redisReply& r) {
      if (r.type != REDIS_REPLY_INTEGER) return detail::unexpected_reply();
      if (r.integer == -2) return Verdict{NodeOutcome::refused, "no key"};
      ttls.push_back(r.integer == -1 ? std::numeric_limits<long long>::max() : r.integer);
      return Verdict{NodeOutcome::ok, "key exists"};
    });
    if (!decide(tally, "remaining_ttl")) return std::nullopt;
    // The Q-th largest: the time until fewer than Q nodes keep the key.
    std::sort(ttls.begin(), ttls.end(), std::greater<>());
    const long long ttl = ttls[nodes().quorum() - 1];
    if (ttl == std::numeric_limits<long long>::max()) return milliseconds::max();
    return milliseconds(ttl);
  }

  void stop_renewal() noexcept {
    if (!renewal_) return;
    detail::Watchdog::stop(*renewal_);
    renewal_.reset();
  }

  /// Without auto_renew: the watchdog watches the validity's new end.
  void rewatch_lease_end() noexcept {
    try {
      auto watch = detail::Watchdog::instance().watch_lease_end(state_.name, state_.lease);
      stop_renewal();
      renewal_ = std::move(watch);
    } catch (...) {
      // Out of memory: the watch of the old end stays (late if it moved earlier).
    }
  }

 private:
  enum class Failure { none, busy, unreachable, too_slow };
  struct Attempt {
    Failure failure = Failure::none;
    std::uint64_t fence = 0;
    Clock::time_point deadline;
    std::string why;
  };

  void probe() {
    const std::array<std::string_view, 1> args{"PING"};
    auto replies = nodes().command(args, "redlock PING", std::max(nodes().per_node_timeout(), milliseconds(100)));
    const Tally tally = detail::settle(nodes(), replies, NodeOperation::probe, {}, [](std::size_t, const redisReply& r) {
      if (r.type == REDIS_REPLY_STATUS) return Verdict{NodeOutcome::ok, "reachable"};
      return detail::unexpected_reply();
    });
    if (tally.ok >= nodes().quorum()) return;
    throw QuorumError("redlock '" + state_.name + "': only " + std::to_string(tally.ok) + " of " +
                          std::to_string(nodes().size()) + " nodes are reachable, a majority of " +
                          std::to_string(nodes().quorum()) + " is required; reachable: " +
                          tally.nodes_with(nodes(), NodeOutcome::ok) + "; unreachable: " + tally.failed_nodes(nodes()),
                      state_.name);
  }

  /// One attempt: SET NX on all nodes, fence write-back, validity check.
  /// Cleans up after itself when it fails. Every fan-out waits for slow
  /// nodes at most until `not_after` (the caller's deadline), save one round
  /// trip: a black-holed or frozen node cannot make the caller overrun.
  Attempt try_once(const std::string& token, Clock::time_point not_after) {
    Attempt attempt;
    const bool fencing = state_.options.fencing;
    // Before the first request is written: the lease is counted from here.
    const auto start = Clock::now();
    const std::array<std::string_view, 2> keys{state_.name, lease_->fence_key};
    std::vector<NodeReply> replies;
    // The attempt is decided once a majority granted (or cannot): a frozen
    // minority costs nothing. A node not waited for may still run the SET
    // later; the key holds our token and expires by its TTL. Fences stay
    // safe: the granting majority intersects the majority that recorded
    // the previous holder's fence.
    if (fencing) {
      const std::array<std::string_view, 2> args{token, ttl_text_};
      // Yes only for a reply the verdict below counts as acquired: a grant
      // whose fence counter is garbage is a failed node there, and voting
      // yes for it decided the fan-out early (a 2 ms grace), leaving a
      // slower healthy node unheard: a spurious QuorumError.
      const detail::Voter granted_fenced = [](const redisReply& r) {
        const bool ok = r.type == REDIS_REPLY_ARRAY && r.elements >= 1 && r.element[0]->type == REDIS_REPLY_INTEGER &&
                        r.element[0]->integer == 1 && detail::fence_candidate(r).has_value();
        return ok ? detail::Vote::yes : detail::Vote::no;
      };
      replies = nodes().script(detail::redlock_scripts::acquire_fenced(), keys, args, "redlock acquire", not_after,
                               granted_fenced);
    } else {
      const std::array<std::string_view, 6> args{"SET", state_.name, token, "NX", "PX", ttl_text_};
      const detail::Voter granted_plain = [](const redisReply& r) {
        return r.type == REDIS_REPLY_STATUS ? detail::Vote::yes : detail::Vote::no;
      };
      replies = nodes().command(args, "redlock acquire", std::nullopt, not_after, granted_plain);
    }
    std::uint64_t highest = 0;
    const Tally granted = detail::settle(nodes(), replies, NodeOperation::acquire, token, [&](std::size_t, const redisReply& r) {
      if (!fencing) {
        if (r.type == REDIS_REPLY_STATUS) return Verdict{NodeOutcome::ok, "acquired"};
        if (r.type == REDIS_REPLY_NIL) return Verdict{NodeOutcome::refused, "held by another owner"};
        return detail::unexpected_reply();
      }
      const auto candidate = detail::fence_candidate(r);
      if (!candidate) return Verdict{NodeOutcome::failed, "the fence counter or the server time is not a number"};
      // Every answering node's candidate counts, granted or not: more nodes
      // read means more chances to see the latest fence.
      highest = std::max(highest, *candidate);
      if (r.element[0]->integer == 1) return Verdict{NodeOutcome::ok, "acquired"};
      return Verdict{NodeOutcome::refused, "held by another owner"};
    });
    const std::size_t q = nodes().quorum();
    if (granted.ok < q) {
      // Nodes that failed after the request was written may still have
      // executed the SET: clean up unless every node plainly refused or was
      // never reached.
      if (granted.ok > 0 || any_sent_and_failed(replies, granted)) lease_->release(token, not_after);
      attempt.failure = granted.ok + granted.refused < q ? Failure::unreachable : Failure::busy;
      attempt.why = "could not acquire lock '" + state_.name + "' on a majority: acquired on " + granted.summary(nodes());
      return attempt;
    }
    if (fencing) {
      if (highest == std::numeric_limits<std::uint64_t>::max()) {
        lease_->release(token, not_after);
        throw LockError("lock '" + state_.name + "': the fence counter is exhausted", state_.name);
      }
      attempt.fence = highest;
      const std::string fence_text = std::to_string(attempt.fence);
      const std::array<std::string_view, 3> args{token, fence_text, kFenceCounterTtlMs};
      const detail::Voter recorded = [](const redisReply& r) {
        return r.type == REDIS_REPLY_INTEGER && r.integer == 1 ? detail::Vote::yes : detail::Vote::no;
      };
      auto acks = nodes().script(detail::redlock_scripts::write_fence(), keys, args, "redlock fence", not_after, recorded);
      const Tally written = detail::settle(nodes(), acks, NodeOperation::fence, token, [](std::size_t, const redisReply& r) {
        if (r.type != REDIS_REPLY_INTEGER) return detail::unexpected_reply();
        if (r.integer == 1) return Verdict{NodeOutcome::ok, "fence recorded"};
        return Verdict{NodeOutcome::refused, "fence recorded, but the key no longer holds our token"};
      });
      if (written.ok < q) {
        lease_->release(token, not_after);
        attempt.failure = Failure::unreachable;
        attempt.why = "lock '" + state_.name + "': the fence was acknowledged by " + written.summary(nodes());
        return attempt;
      }
    }
    attempt.deadline = start + state_.options.ttl - detail::drift_allowance(state_.options.ttl, options_.drift_factor);
    const auto now = Clock::now();
    if (now >= attempt.deadline) {
      lease_->release(token, not_after);
      attempt.failure = Failure::too_slow;
      attempt.why = "lock '" + state_.name + "': a majority was won only after " +
                    std::to_string(micros(now - start).count() / 1000) + " ms, past the validity of the " +
                    std::to_string(state_.options.ttl.count()) + " ms lease (per-node timeout " +
                    std::to_string(nodes().per_node_timeout().count()) + " ms); released everywhere";
      return attempt;
    }
    return attempt;
  }

  /// Whether a node failed after its request was written (its SET may have
  /// run with the reply lost). A node never reached ran nothing.
  static bool any_sent_and_failed(const std::vector<NodeReply>& replies, const Tally& tally) {
    for (std::size_t i = 0; i < replies.size(); ++i)
      if (tally.outcomes[i] == NodeOutcome::failed && replies[i].sent) return true;
    return false;
  }

  bool on_acquired(const std::string& token, const Attempt& attempt) {
    state_.held = true;
    state_.token = token;
    state_.fence = attempt.fence;
    state_.begin_lease();
    lease_->set_deadline(attempt.deadline);
    // lost() turns true by itself once this passes unrenewed: a holder that
    // resumes after a pause longer than its lease must not believe it holds.
    state_.lease->set_lease_end(attempt.deadline);
    if (state_.options.auto_renew) {
      auto entry = std::make_shared<detail::RenewalEntry>();
      entry->name = state_.name;
      entry->ttl = state_.options.ttl;
      entry->signal = state_.lease;
      entry->renew = [lease = lease_, token, signal = state_.lease]() noexcept {
        return renew(*lease, token, *signal);
      };
      const auto now = Clock::now();
      entry->next_due = now + std::max(state_.options.ttl / 3, milliseconds(1));
      entry->lease_expires = attempt.deadline;
      if (state_.options.max_hold.count() > 0) entry->hold_deadline = now + state_.options.max_hold;
      renewal_ = entry;
      detail::Watchdog::instance().add(std::move(entry));
    } else {
      // Not renewed, the validity simply ends: the watchdog signals that end
      // (stop token, on_lost) as it signals a renewal's failure.
      renewal_ = detail::Watchdog::instance().watch_lease_end(state_.name, state_.lease);
    }
    return true;
  }

  /// The watchdog's renewal: grow every node's TTL back to ttl.
  static detail::RenewResult renew(RedlockLease& lease, const std::string& token, detail::LeaseSignal& signal) noexcept {
    using R = RedlockLease::ExtendResult;
    try {
      const auto outcome = lease.extend(token, RedlockLease::ExtendMode::grow, lease.ttl);
      switch (outcome.result) {
        case R::extended:
          signal.set_lease_end(lease.validity_deadline());
          return detail::RenewResult::renewed;
        // Losses are declared by the watchdog once the round released its
        // entry mutexes (an on_lost may unlock other locks).
        case R::taken:
          return detail::RenewResult::not_owned;
        case R::late:
          return detail::RenewResult::unreachable;
        case R::unreachable:
          if (Clock::now() < lease.validity_deadline()) return detail::RenewResult::io_error;
          return detail::RenewResult::unreachable;
      }
    } catch (...) {
    }
    return detail::RenewResult::io_error;
  }

  void extend_as(RedlockLease::ExtendMode mode, milliseconds amount, const char* what) {
    if (!state_.held) throw LockError(std::string("cannot ") + what + " an unlocked lock '" + state_.name + "'", state_.name);
    using R = RedlockLease::ExtendResult;
    const auto outcome = lease_->extend(state_.token, mode, amount);
    switch (outcome.result) {
      case R::extended:
        state_.lease->set_lease_end(lease_->validity_deadline());
        if (!state_.options.auto_renew) rewatch_lease_end();  // the end moved, earlier too with a replaced ttl
        return;
      case R::taken:
      case R::late:
        state_.lease->declare_lost(outcome.result == R::taken ? LossReason::taken : LossReason::unreachable,
                                   std::string(what) + ": " + outcome.detail);
        throw LockNotOwned(std::string("cannot ") + what + " lock '" + state_.name + "': " + outcome.detail, state_.name);
      case R::unreachable:
        throw QuorumError(std::string("cannot ") + what + " lock '" + state_.name + "': " + outcome.detail, state_.name);
    }
  }

  /// A majority said yes → true; more than N − Q said no → false; else the
  /// question cannot be answered.
  bool decide(const Tally& tally, const char* what) const {
    if (tally.ok >= nodes().quorum()) return true;
    if (tally.refused > nodes().size() - nodes().quorum()) return false;
    throw QuorumError(std::string(what) + "('" + state_.name + "'): too few nodes answered: " + tally.summary(nodes()),
                      state_.name);
  }

  Clock::duration jitter() {
    thread_local std::mt19937_64 engine{std::random_device{}()};
    std::uniform_int_distribution<long long> pick(std::chrono::microseconds(options_.retry_delay_min).count(),
                                                  std::chrono::microseconds(options_.retry_delay_max).count());
    return std::chrono::microseconds(pick(engine));
  }

  State& state_;
  RedlockOptions options_;
  std::shared_ptr<RedlockLease> lease_;
  std::string ttl_text_;
  std::shared_ptr<detail::RenewalEntry> renewal_;
};

namespace {
std::vector<Client> clients_from(const std::vector<std::string>& urls) {
  std::vector<Client> clients;
  clients.reserve(urls.size());
  for (const auto& url : urls) clients.emplace_back(url);
  return clients;
}
}  // namespace

Redlock::Redlock(std::vector<Client> nodes, std::string name, LockOptions options, RedlockOptions redlock)
    : DistributedLock(std::move(name), std::move(options)),
      impl_(std::make_unique<Impl>(std::move(nodes), state(), std::move(redlock))) {}

Redlock::Redlock(const std::vector<std::string>& urls, std::string name, LockOptions options, RedlockOptions redlock)
    : Redlock(clients_from(urls), std::move(name), std::move(options), std::move(redlock)) {}

Redlock::~Redlock() {
  unlock();
  impl_->stop_renewal();
}

bool Redlock::acquire_until(Clock::time_point deadline) { return impl_->acquire_until(deadline); }
void Redlock::release() { impl_->release(); }
void Redlock::extend(milliseconds additional, bool replace_ttl) { impl_->extend(additional, replace_ttl); }
void Redlock::reacquire() { impl_->reacquire(); }
bool Redlock::owned() { return impl_->owned(); }
bool Redlock::locked() { return impl_->locked(); }
std::optional<milliseconds> Redlock::remaining_ttl() { return impl_->remaining_ttl(); }

Clock::time_point Redlock::validity_deadline() const noexcept { return impl_->validity_deadline(); }
milliseconds Redlock::validity() const noexcept {
  const auto deadline = impl_->validity_deadline();
  const auto now = Clock::now();
  if (deadline <= now) return milliseconds(0);
  return std::chrono::floor<milliseconds>(deadline - now);
}
std::size_t Redlock::node_count() const noexcept { return impl_->nodes().size(); }
std::size_t Redlock::quorum() const noexcept { return impl_->nodes().quorum(); }
milliseconds Redlock::per_node_timeout() const noexcept { return impl_->nodes().per_node_timeout(); }
std::vector<std::string> Redlock::endpoints() const { return impl_->nodes().endpoints(); }
const RedlockOptions& Redlock::redlock_options() const noexcept { return impl_->options(); }

}  // namespace lockon
