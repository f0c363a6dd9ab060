// MultiLock: ordered acquisition of one lock object per key (see
// include/lockon/multi_lock.hpp for the contract and the deadlock argument).
#include "lockon/multi_lock.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "protocol/lease.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "multi/give_back.hpp"
#include "multi/one_script.hpp"

namespace lockon {

// Per-key loss callbacks run on the watchdog thread (or an unlocking thread)
// and must reach the lease of the current acquisition, which is replaced at
// each acquisition: they go through this relay, shared with every key's lock.
struct MultiLock::Relay {
  std::mutex mutex;
  std::shared_ptr<detail::LeaseSignal> lease;  // null while not held

  void forward(const LossEvent& event) {
    std::shared_ptr<detail::LeaseSignal> current;
    {
      const std::lock_guard guard(mutex);
      current = lease;
    }
    // Outside the mutex: the user's on_lost may take its time.
    if (current) current->declare_lost(event.reason, "key '" + event.name + "': " + event.detail);
  }
  void set(std::shared_ptr<detail::LeaseSignal> next) {
    const std::lock_guard guard(mutex);
    lease = std::move(next);
  }
};

namespace {

// The distinct names in the order given: two arguments naming one entity
// are one key, named once (LockContext::key() shows this name).
std::string joined(const std::vector<std::string>& names) {
  if (names.empty()) throw ConfigError("lockon: MultiLock needs at least one key");
  std::string text;
  std::unordered_set<std::string_view> seen;
  for (const std::string& name : names) {
    validate_name(name, "lockon: MultiLock: a key");
    if (!seen.insert(name).second) continue;
    if (!text.empty()) text.push_back(',');
    text.append(name);
  }
  return text;
}

LockFactory single_instance(Client client) {
  return [client = std::move(client)](std::string key, LockOptions options) -> std::unique_ptr<DistributedLock> {
    return std::make_unique<Lock>(client, std::move(key), std::move(options));
  };
}

// Every key's State, where each backend keeps the lease end it can prove
// (a Lock: send time + ttl; a Redlock: its validity deadline). State is
// DistributedLock's protected part: named through a derived class.
struct KeyState : DistributedLock {
  static const State& of(const DistributedLock& lock) { return (lock.*(&KeyState::state))(); }
};

// The ordered path holds the earlier keys while it waits for later ones,
// and their leases run on meanwhile (without auto_renew, or while renewals
// fail). A key whose lease ended may have had another holder since: such a
// grant must never reach the caller as held (until session 21, fn started
// with lost() already true). The rule is a single Lock's for its own grant
// (confirm_lease, src/lock/lock.cpp): at least half a lease provably left,
// else one round trip that confirms the key is still ours and restarts its
// lease (reacquire()). False when a key's lease is lost or has ended.
bool every_lease_proven(const std::vector<std::unique_ptr<DistributedLock>>& locks) {
  for (const auto& lock : locks) {
    if (lock->lost()) return false;
    const LockOptions& options = lock->options();
    if (options.no_expiry) continue;
    const auto& lease = KeyState::of(*lock).lease;
    if (lease && detail::add_saturating(DistributedLock::Clock::now(), options.ttl / 2) < lease->lease_end()) continue;
    try {
      lock->reacquire();
    } catch (const LockNotOwned&) {
      return false;  // expired or another owner's (reacquire() declared it lost)
    }
    if (lock->lost()) return false;
  }
  return true;
}

}  // namespace

MultiLock::MultiLock(Client client, std::vector<std::string> names, LockOptions options)
    : MultiLock(std::move(names), std::move(options), single_instance(std::move(client))) {}

MultiLock::MultiLock(std::vector<std::string> names, LockOptions options, const LockFactory& make_lock)
    : DistributedLock(joined(names), std::move(options)), relay_(std::make_shared<Relay>()) {
  if (!make_lock) throw ConfigError("lockon: MultiLock needs a lock factory");
  build(std::move(names), make_lock);
}

void MultiLock::build(std::vector<std::string> names, const LockFactory& make_lock) {
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

  LockOptions per_key = options();
  per_key.keep_queue_place = false;  // see the header: a kept place could invert the order
  per_key.on_lost = [relay = relay_](const LossEvent& event) { relay->forward(event); };
  locks_.reserve(sorted.size());
  for (std::string& key : sorted) {
    std::unique_ptr<DistributedLock> lock = make_lock(key, per_key);
    if (!lock) throw ConfigError("lockon: MultiLock: the lock factory returned no lock for '" + key + "'");
    locks_.push_back(std::move(lock));
  }
  positions_.reserve(names.size());
  for (const std::string& name : names) {
    const auto at = std::lower_bound(sorted.begin(), sorted.end(), name);
    positions_.push_back(static_cast<std::size_t>(at - sorted.begin()));
  }
  one_script_ = detail::OneScriptAcquisition::eligible(locks_);
}

MultiLock::~MultiLock() { unlock(); }

std::vector<const DistributedLock*> MultiLock::key_locks() const {
  std::vector<const DistributedLock*> all;
  all.reserve(locks_.size());
  for (const auto& lock : locks_) all.push_back(lock.get());
  return all;
}

void MultiLock::release_taken(std::size_t count, Clock::time_point deadline) noexcept {
  detail::give_back(locks_, count, deadline);
}

bool MultiLock::acquire_until(Clock::time_point deadline) {
  State& s = state();
  if (s.held_here()) throw LockError("lock '" + s.name + "' is already held by this object (not reentrant)", s.name);
  busy_ = kNone;
  // Every key, or none (released again) and false.
  const auto take_every_key = [&]() -> bool {
    if (one_script_) {
      // Every key free and nobody queued: all of them in one round trip.
      using Outcome = detail::OneScriptAcquisition::Outcome;
      const Outcome outcome = detail::OneScriptAcquisition::take(locks_, deadline);
      if (outcome == Outcome::taken) return true;
      if (outcome == Outcome::deadline_passed) return false;
      // A key is held: a single attempt fails as the ordered one would.
      if (outcome == Outcome::held && deadline == Clock::time_point::min()) return false;
      // Otherwise wait key by key in order, with each Lock's queueing.
    }
    std::size_t taken = 0;
    try {
      for (; taken < locks_.size(); ++taken) {
        DistributedLock& lock = *locks_[taken];
        const bool got = deadline == Clock::time_point::min() ? lock.try_lock() : lock.try_lock_until(deadline);
        if (!got) break;
      }
    } catch (...) {
      release_taken(taken, deadline);
      throw;
    }
    if (taken < locks_.size()) {
      busy_ = taken;
      release_taken(taken, deadline);
      return false;
    }
    return true;
  };
  for (;;) {
    if (!take_every_key()) return false;
    bool proven = false;
    try {
      proven = every_lease_proven(locks_);
    } catch (...) {
      release_taken(locks_.size(), deadline);
      throw;
    }
    if (proven) return on_taken();
    // A key's lease ended while a later key was awaited: not an
    // acquisition. Given back, and taken again while the deadline allows;
    // a caller's retry policy (lock_on) sees it all as one attempt.
    release_taken(locks_.size(), deadline);
    if (deadline == Clock::time_point::min() || Clock::now() >= deadline) return false;
  }
}

bool MultiLock::on_taken() {
  State& s = state();
  s.held = true;
  s.begin_lease();
  // The keys' leases also end by the clock (a holder resumed after a pause
  // longer than its ttl): the MultiLock is lost as soon as one key is,
  // before the watchdog had a chance to look. (The keys outlive the lease's
  // users: only this object's lost() calls it.)
  s.lease->set_parts_lost([locks = key_locks()]() noexcept {
    return std::any_of(locks.begin(), locks.end(), [](const DistributedLock* lock) { return lock->lost(); });
  });
  s.fence = locks_[positions_.front()]->fence();
  relay_->set(s.lease);
  // A key lost after every_lease_proven() looked and before the relay was
  // set: its on_lost found no lease to forward to.
  for (const auto& lock : locks_) {
    if (lock->lost()) s.lease->declare_lost(LossReason::taken, "key '" + lock->name() + "' was lost during acquisition");
  }
  return true;
}

void MultiLock::release() {
  State& s = state();
  if (!s.held_here()) throw LockError("cannot release an unlocked lock '" + s.name + "'", s.name);
  std::exception_ptr first;
  for (std::size_t i = locks_.size(); i-- > 0;) {
    locks_[i]->unlock();  // noexcept; retries an unsent release in the background
    if (!first) first = locks_[i]->last_unlock_error();
  }
  s.held = false;
  relay_->set(nullptr);
  if (first) std::rethrow_exception(first);
  if (s.lease) s.lease->close();
}

void MultiLock::extend(std::chrono::milliseconds additional, bool replace_ttl) {
  if (!state().held_here()) throw LockError("cannot extend an unlocked lock '" + state().name + "'", state().name);
  for (const auto& lock : locks_) lock->extend(additional, replace_ttl);
}

void MultiLock::reacquire() {
  if (!state().held_here()) throw LockError("cannot reacquire an unlocked lock '" + state().name + "'", state().name);
  for (const auto& lock : locks_) lock->reacquire();
}

bool MultiLock::owned() {
  for (const auto& lock : locks_)
    if (!lock->owned()) return false;
  return true;
}

bool MultiLock::locked() {
  for (const auto& lock : locks_)
    if (lock->locked()) return true;
  return false;
}

std::optional<std::chrono::milliseconds> MultiLock::remaining_ttl() {
  std::optional<std::chrono::milliseconds> least;
  for (const auto& lock : locks_) {
    const std::optional<std::chrono::milliseconds> ttl = lock->remaining_ttl();
    if (!ttl) return std::nullopt;
    if (!least || *ttl < *least) least = ttl;
  }
  return least;
}

void MultiLock::abandon_wait() noexcept {
  for (const auto& lock : locks_) lock->abandon_wait();
}

const std::string& MultiLock::name(std::size_t i) const { return locks_[positions_.at(i)]->name(); }

std::uint64_t MultiLock::fence(std::size_t i) const { return locks_[positions_.at(i)]->fence(); }

std::vector<std::uint64_t> MultiLock::fences() const {
  std::vector<std::uint64_t> all;
  all.reserve(positions_.size());
  for (const std::size_t at : positions_) all.push_back(locks_[at]->fence());
  return all;
}

const std::string& MultiLock::busy_key() const noexcept {
  static const std::string none;
  return busy_ == kNone ? none : locks_[busy_]->name();
}

std::vector<std::string> MultiLock::keys() const {
  std::vector<std::string> all;
  all.reserve(locks_.size());
  for (const auto& lock : locks_) all.push_back(lock->name());
  return all;
}

}  // namespace lockon
