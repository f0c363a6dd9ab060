// RedisLocker's non-template parts: policy validation, the attempt loop,
// LockContext queries, backends, and the process-wide default locker.
#include "lockon/locker.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string_view>
#include <vector>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "lockon/decorate.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"
#include "lockon/lock.hpp"
#include "lockon/lock_context.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/name.hpp"
#include "lockon/options.hpp"
#include "protocol/lease.hpp"
#include "lock_on/acquire_internal.hpp"
#include "common/metrics_internal.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/redlock.hpp"
#include <stdexcept>

namespace lockon {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

milliseconds elapsed_ms(Clock::time_point since) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - since);
}

milliseconds jitter(milliseconds bound) {
  if (bound.count() <= 0) return milliseconds(0);
  thread_local std::minstd_rand random(std::random_device{}());
  std::uniform_int_distribution<long long> pick(0, bound.count());
  return milliseconds(pick(random));
}

std::string describe(const detail::CallSite& site, std::string_view key) {
  std::string text = "lock_on '";
  text.append(site.function_name);
  text.append("': lock '");
  text.append(key);
  text.push_back('\'');
  return text;
}

}  // namespace

namespace detail {

// A function digest (32 hex digits) or none (entity scope), stored without
// allocating.
class IdentityDigest {
 public:
  void assign(std::string_view::const_iterator first, std::string_view::const_iterator last) noexcept {
    size_ = static_cast<std::size_t>(std::min<std::ptrdiff_t>(last - first, static_cast<std::ptrdiff_t>(chars_.size())));
    std::copy_n(first, size_, chars_.begin());
  }
  bool operator==(std::string_view other) const noexcept { return std::string_view(chars_.data(), size_) == other; }

 private:
  std::array<char, 32> chars_{};
  std::size_t size_ = 0;
};

namespace {
thread_local std::string encoding_spare;
}  // namespace

std::string take_encoding_buffer() noexcept { return std::move(encoding_spare); }

// What identifies a lock key within one locker: the policy (prefix, lock
// options), the function identity and the encoded arguments. Compared
// instead of the key itself so that a hit skips hashing.
class IdleLocks {
 public:
  std::unique_ptr<DistributedLock> take(const PreparedPolicy& policy, std::string_view digest,
                                        std::string_view encoded_args) {
    std::unique_ptr<DistributedLock> found;
    const std::lock_guard guard(mutex_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->policy_id == policy.id && it->digest == digest && it->encoded_args == encoded_args) {
        found = std::move(it->lock);
        // The caller holds the same bytes: this copy's storage becomes the
        // thread's next encoding buffer (take_encoding_buffer).
        encoding_spare = std::move(it->encoded_args);
        entries_.erase(std::next(it).base());
        break;
      }
    }
    return found;
  }

  void put(const PreparedPolicy& policy, std::string_view digest, std::string encoded_args,
           std::unique_ptr<DistributedLock> lock) noexcept {
    std::unique_ptr<DistributedLock> evicted;  // destroyed after the mutex is released
    try {
      const std::lock_guard guard(mutex_);
      if (entries_.size() >= kCapacity) {
        evicted = std::move(entries_.front().lock);
        entries_.erase(entries_.begin());
      }
      Entry entry;
      entry.policy_id = policy.id;
      entry.digest.assign(digest.begin(), digest.end());
      entry.encoded_args = std::move(encoded_args);
      entry.lock = std::move(lock);
      entries_.push_back(std::move(entry));
    } catch (...) {
      // Out of memory: the lock is simply not kept.
    }
  }

 private:
  // Enough for the hot keys of a process; more would only hold memory.
  static constexpr std::size_t kCapacity = 16;

  struct Entry {
    std::uint64_t policy_id = 0;
    IdentityDigest digest;
    std::string encoded_args;
    std::unique_ptr<DistributedLock> lock;
  };

  std::mutex mutex_;
  std::vector<Entry> entries_;  // least recently filed first
};

namespace {

// Called inside a catch block: rethrows the exception being handled as the
// same type, its message prefixed with the function and the lock key, so an
// outage reported through lock_on says which lock it hit. LockErrors already
// carry the key; anything not a lockon::Error passes through unchanged.
[[noreturn]] void rethrow_with_context(const CallSite& site, std::string_view key) {
  metrics_detail::record_acquire(site.function_name, metrics_detail::Outcome::error, {});
  const std::string prefix = describe(site, key) + ": ";
  try {
    throw;
  } catch (const LockError&) {
    throw;
  } catch (const TlsError& e) {
    throw TlsError(prefix + e.what());
  } catch (const ConnectError& e) {
    throw ConnectError(prefix + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what());
  } catch (const ClosedError& e) {
    throw ClosedError(prefix + e.what());
  } catch (const ProtocolError& e) {
    throw ProtocolError(prefix + e.what());
  } catch (const IoError& e) {
    throw IoError(prefix + e.what());
  } catch (const AuthError& e) {
    throw AuthError(prefix + e.what(), e.code());
  } catch (const WrongTypeError& e) {
    throw WrongTypeError(prefix + e.what(), e.code());
  } catch (const PermissionError& e) {
    throw PermissionError(prefix + e.what(), e.code());
  } catch (const ReadOnlyError& e) {
    throw ReadOnlyError(prefix + e.what(), e.code());
  } catch (const ServerBusyError& e) {
    throw ServerBusyError(prefix + e.what(), e.code());
  } catch (const ReplyError& e) {
    throw ReplyError(prefix + e.what(), e.code());
  } catch (const PoolTimeoutError& e) {
    throw PoolTimeoutError(prefix + e.what());
  } catch (const UnsupportedServerError& e) {
    throw UnsupportedServerError(prefix + e.what());
  }
}

}  // namespace

Acquisition refuse_held_by_this_thread(const CallSite& site, std::string_view key, bool throw_on_busy) {
  if (!throw_on_busy) return Acquisition{nullptr, 0, {}};
  throw HeldByThisThread(describe(site, key) +
                             " is already held by the calling thread (an enclosing lock_on call): a nested call "
                             "would wait for itself; set LockOnOptions::reentrant to run it under the enclosing lock",
                         std::string(key));
}

Acquisition acquire(const CallSite& site, std::string encoded_args, bool throw_on_busy) {
  const LockerPolicy& policy = site.policy.policy;
  if (this_thread_holds_any()) {
    const std::string key = make_lock_key(policy.key_prefix, site.digest, encoded_args);
    if (DistributedLock* outer = held_by_this_thread(site.core.backend, key)) {
      if (!site.reentrant) return refuse_held_by_this_thread(site, key, throw_on_busy);
      Acquisition nested;
      nested.reentered = outer;
      return nested;
    }
  }
  std::unique_ptr<DistributedLock> lock = site.core.idle->take(site.policy, site.digest, encoded_args);
  if (!lock) {
    std::string key = make_lock_key(policy.key_prefix, site.digest, encoded_args);
    try {
      lock = site.core.make_lock(key, site.policy.lock_options);
    } catch (...) {
      rethrow_with_context(site, key);
    }
    if (!lock) throw ConfigError("lockon: the RedisLocker's lock factory returned no lock");
  }
  return attempt_loop(site, std::move(lock), std::move(encoded_args), throw_on_busy, true);
}

Acquisition attempt_loop(const CallSite& site, std::unique_ptr<DistributedLock> lock, std::string encoded_args,
                         bool throw_on_busy, bool reusable) {
  const LockerPolicy& policy = site.policy.policy;
  const Clock::time_point start = Clock::now();
  // A try_ call without a policy of its own makes one immediate try: it
  // waits only when asked to (LockOnOptions::policy).
  const bool single_try = !throw_on_busy && !site.own_policy;
  const bool bounded = !single_try && policy.timeout.count() > 0;
  const Clock::time_point deadline = bounded ? start + policy.timeout : Clock::time_point::max();
  for (int attempt = 1;; ++attempt) {
    const milliseconds window = single_try ? milliseconds(0) : policy.retry_delay + jitter(policy.retry_jitter);
    bool acquired = false;
    try {
      if (window.count() == 0) {
        acquired = lock->try_lock();
      } else if (bounded && Clock::now() + window >= deadline) {
        acquired = lock->try_lock_until(deadline);  // the last window is cut to the deadline
      } else {
        acquired = lock->try_lock_for(window);
      }
    } catch (...) {
      rethrow_with_context(site, lock->name());
    }
    if (policy.on_attempt) {
      try {
        policy.on_attempt(AttemptEvent{site.function_name, lock->name(), attempt, acquired, elapsed_ms(start)});
      } catch (...) {
        // Not every backend releases in its destructor: never leak a held lock.
        if (acquired) lock->unlock();
        lock->abandon_wait();
        throw;
      }
    }
    if (acquired) {
      const Clock::time_point now = Clock::now();
      metrics_detail::record_acquire(site.function_name, metrics_detail::Outcome::acquired, now - start);
      return Acquisition{std::move(lock), attempt, std::move(encoded_args), now, reusable};
    }

    // The deadline wins when both limits are reached by the same attempt.
    const bool timed_out = bounded && Clock::now() >= deadline;
    if (single_try || timed_out || (policy.max_retry > 0 && attempt >= policy.max_retry)) {
      lock->abandon_wait();
      const std::string key = lock->name();
      // lock_on_each: which of the keys was busy.
      std::string busy;
      if (const auto* multi = dynamic_cast<const MultiLock*>(lock.get()); multi != nullptr && !multi->busy_key().empty())
        busy = " (busy: '" + multi->busy_key() + "')";
      const long long waited_ms = elapsed_ms(start).count();
      if (reusable) site.core.idle->put(site.policy, site.digest, std::move(encoded_args), std::move(lock));
      metrics_detail::record_acquire(site.function_name,
                                     timed_out ? metrics_detail::Outcome::timeout : metrics_detail::Outcome::busy, {});
      if (!throw_on_busy) return Acquisition{nullptr, attempt, {}};
      const std::string attempts = std::to_string(attempt) + (attempt == 1 ? " attempt" : " attempts");
      if (timed_out) {
        throw AcquireTimeout(describe(site, key) + ": acquire lock timeout: still held by another owner after " +
                                 std::to_string(waited_ms) + " ms (" + attempts + ")" + busy,
                             key);
      }
      throw RetriesExhausted(describe(site, key) + " still busy after " + attempts + " over " +
                                 std::to_string(waited_ms) + " ms (max_retry " + std::to_string(policy.max_retry) +
                                 "): held by another owner every time" + busy,
                             key);
    }
  }
}

// lock_on's metrics read the acquisition's state, which DistributedLock
// keeps protected: named through a derived class, as C++ allows.
struct StateAccess : DistributedLock {
  static const DistributedLock::State& of(const DistributedLock& lock) { return (lock.*(&StateAccess::state))(); }
};

void recycle(const CallSite& site, Acquisition&& acquired) noexcept {
  if (acquired.lock) {
    const auto& state = StateAccess::of(*acquired.lock);
    metrics_detail::record_release(site.function_name, Clock::now() - acquired.acquired_at, acquired.lock->lost(),
                                   state.handed_over, state.lease ? state.lease->renewal_failures() : 0);
  }
  if (!acquired.lock || !acquired.reusable || acquired.lock->held()) return;  // never file a held lock
  site.core.idle->put(site.policy, site.digest, std::move(acquired.encoded_args), std::move(acquired.lock));
}

}  // namespace detail

// ------------------------------------------------------------ LockContext

std::chrono::milliseconds LockContext::remaining() const {
  if (lock_.lost()) return milliseconds(0);
  if (const auto* redlock = dynamic_cast<const Redlock*>(&lock_)) return redlock->validity();
  const std::optional<milliseconds> ttl = lock_.remaining_ttl();
  if (!ttl || ttl->count() < 0) return milliseconds(0);
  return *ttl;
}

std::uint64_t LockContext::fence(std::size_t i) const {
  if (const auto* multi = dynamic_cast<const MultiLock*>(&lock_)) return multi->fence(i);
  if (i != 0) throw std::out_of_range("lockon: LockContext::fence(i): the lock has one key");
  return lock_.fence();
}

void LockContext::throw_if_lost() const {
  if (!lock_.lost()) return;
  std::string message = "lock_on '";
  message.append(function_name_);
  message.append("': the lease on lock '" + lock_.name() +
                 "' was lost while the function ran, so its mutual exclusion was not guaranteed; the result was "
                 "discarded");
  if (const std::exception_ptr error = lock_.last_unlock_error()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message.append(" (release: ");
      message.append(e.what());
      message.push_back(')');
    } catch (...) {
    }
  }
  throw LockLost(message, lock_.name());
}

// ------------------------------------------------------------ RedisLocker

namespace {

std::shared_ptr<const detail::LockerCore> make_core(LockFactory make_lock, LockerPolicy policy,
                                                   std::uint64_t backend = 0) {
  if (!make_lock) throw ConfigError("lockon: RedisLocker needs a lock factory");
  static std::atomic<std::uint64_t> next_backend{1};
  if (backend == 0) backend = next_backend.fetch_add(1, std::memory_order_relaxed);
  return std::make_shared<const detail::LockerCore>(
      detail::LockerCore{std::move(make_lock), detail::PreparedPolicy::prepare(std::move(policy)),
                         std::make_shared<detail::IdleLocks>(), backend});
}

LockFactory single_instance(Client client) {
  return [client = std::move(client)](std::string key, LockOptions options) -> std::unique_ptr<DistributedLock> {
    return std::make_unique<Lock>(client, std::move(key), std::move(options));
  };
}

}  // namespace

RedisLocker::RedisLocker(std::string_view url, LockerPolicy policy, PoolOptions pool)
    : RedisLocker(Client(url, pool), std::move(policy)) {}

RedisLocker::RedisLocker(Client client, LockerPolicy policy)
    : core_(make_core(single_instance(std::move(client)), std::move(policy))) {}

RedisLocker::RedisLocker(LockFactory make_lock, LockerPolicy policy)
    : core_(make_core(std::move(make_lock), std::move(policy))) {}

RedisLocker RedisLocker::redlock(const std::vector<std::string>& urls, LockerPolicy policy,
                                 RedlockOptions redlock_options, PoolOptions pool) {
  if (urls.empty()) throw ConfigError("lockon: RedisLocker::redlock needs at least one node URL");
  // The same server twice would count one vote twice: refuse it here, naming
  // the endpoint (host:port or socket path; never the password).
  std::vector<std::string> endpoints;
  for (const std::string& url : urls) {
    std::string endpoint = ConnectionOptions::from_url(url).endpoint();
    if (std::find(endpoints.begin(), endpoints.end(), endpoint) != endpoints.end())
      throw ConfigError("lockon: RedisLocker::redlock: node " + endpoint +
                        " is listed twice; Redlock needs independent masters");
    endpoints.push_back(std::move(endpoint));
  }
  std::vector<Client> nodes;
  nodes.reserve(urls.size());
  for (const std::string& url : urls) nodes.emplace_back(url, pool);
  LockFactory factory = [nodes = std::move(nodes), redlock_options = std::move(redlock_options)](
                            std::string key, LockOptions options) -> std::unique_ptr<DistributedLock> {
    return std::make_unique<Redlock>(nodes, std::move(key), std::move(options), redlock_options);
  };
  return RedisLocker(std::move(factory), std::move(policy));
}

RedisLocker RedisLocker::with_policy(LockerPolicy policy) const {
  return RedisLocker(make_core(core_->make_lock, std::move(policy), core_->backend));
}

detail::OwnedSite RedisLocker::site(std::string_view name, LockOnOptions options, bool each) const {
  if (each) options.scope = KeyScope::entity;  // lock_on_each locks each argument as its own entity
  if (name.empty()) throw ConfigError("lockon: lock_on needs a non-empty function name");
  const bool own_policy = options.policy.has_value();
  std::shared_ptr<const detail::PreparedPolicy> policy =
      options.policy ? std::make_shared<const detail::PreparedPolicy>(detail::PreparedPolicy::prepare(std::move(*options.policy)))
                     : std::shared_ptr<const detail::PreparedPolicy>(core_, &core_->prepared);
  std::string digest = options.scope == KeyScope::entity ? std::string() : function_digest(name);
  return detail::OwnedSite(core_, std::move(policy), std::string(name), std::move(digest), options.reentrant,
                           own_policy);
}

}  // namespace lockon
