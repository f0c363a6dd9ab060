// lockon/policy.hpp — how `RedisLocker::lock_on` acquires: the retry and
// deadline policy, key scope, and the acquisition loop behind every call.
//
// ONE ATTEMPT is one bounded wait on the lock: an immediate try, then up to
// `retry_delay` (plus jitter) of waiting for the holder's release. The wait is
// notification based — a release wakes the waiter at once and it takes the
// lock within the same attempt; only when the window passes without the lock
// does the attempt count as failed.
//
//   attempt 1: try ─ wait ≤ retry_delay ─┐ (a release wakes it: acquired)
//   attempt 2: try ─ wait ≤ retry_delay ─┤
//   attempt N: ...                       └─ RetriesExhausted after max_retry
//   any time the overall `timeout` passes ─── AcquireTimeout
//
// The last wait is cut to the deadline: the locker never sleeps past it.
//
// DEFAULTS say what their names say: lock_on waits up to `timeout` (10 s)
// and no attempt count ends it first (max_retry = 0); try_lock_on makes one
// immediate try unless its LockOnOptions::policy says how to wait. The seed
// decorator's "three tries, two seconds apart" is `{.max_retry = 3,
// .retry_delay = 2s, .timeout = 0ms}` (README: what changed in 0.2).
//
// A call keeps ONE place in the lock's FIFO queue across all its attempts
// (LockOptions::keep_queue_place): attempts are a counting of windows, not
// a re-queueing, so calls are served in arrival order whatever their
// windows. The place is given up when the call acquires or gives up for
// good (RetriesExhausted, AcquireTimeout, an exception).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/lock.hpp"

namespace lockon {

/// Reported to LockerPolicy::on_attempt after every attempt.
struct AttemptEvent {
  std::string_view function_name{};  // the name given to lock_on / decorate
  std::string_view key{};            // the lock key
  int attempt = 0;                 // 1 for the first attempt
  bool acquired = false;
  std::chrono::milliseconds elapsed{0};  // since the first attempt started
};

/// How a RedisLocker acquires, and the leases it takes. Plain aggregate;
/// every field has a documented default (the seed decorator's values for the
/// retry policy). Validated when a locker or lock_on is created: a bad value
/// throws ConfigError then, never during a call.
struct LockerPolicy {
  /// Attempts before RetriesExhausted (see the top of this file for what an
  /// attempt is). 0 (the default) = unlimited: only `timeout` ends the
  /// wait. Must be ≥ 0.
  int max_retry = 0;
  /// How long one attempt waits for a release before it counts as failed.
  /// 0 = an attempt is a single immediate try (no waiting). Must be ≥ 0;
  /// max_retry = 0 together with retry_delay = 0 is rejected (it would spin).
  std::chrono::milliseconds retry_delay{2000};
  /// Each attempt's window is retry_delay plus a uniformly random extra in
  /// [0, retry_jitter], so contenders that failed together do not retry in
  /// lockstep (matters for Redlock, which polls). 0 = no jitter. Must be ≥ 0.
  std::chrono::milliseconds retry_jitter{0};
  /// Overall acquire deadline of one call, from its first attempt: when it
  /// passes, AcquireTimeout. 0 = no deadline (only max_retry bounds the
  /// wait; both 0 waits forever, like std::mutex::lock). Must be ≥ 0.
  std::chrono::milliseconds timeout{10'000};
  /// The lease of each acquisition (LockOptions::ttl). Must be > 0. With
  /// auto_renew the lease is extended while the function runs, so the ttl
  /// only bounds how long a crashed holder blocks others.
  std::chrono::milliseconds ttl{30'000};
  /// Namespace of every key: "<key_prefix>:...". Must not be empty; the
  /// keys it makes, like every lock name, are at most kMaxNameBytes long
  /// (lockon/name.hpp): a longer prefix is a ConfigError.
  std::string key_prefix = "lockon";
  /// Renew the lease every ttl/3 while the function runs (LockOptions).
  bool auto_renew = true;
  /// Take a fence per acquisition (LockContext::fence()). Costs the
  /// single-instance lock a MULTI/EXEC instead of a plain SET.
  bool fencing = false;
  /// Replicas that must acknowledge each acquisition / hand-over (WAIT)
  /// before fn runs (LockOptions::replica_acks). Single-instance lock only;
  /// AsyncLocker refuses it (ConfigError at the call, nothing sent).
  ReplicaAcks replica_acks{};
  /// Called on the calling thread after each attempt (metrics, logs, tests).
  /// An exception from it propagates out of the call (a lock the attempt
  /// just took is released first, and fn does not run).
  std::function<void(const AttemptEvent&)> on_attempt{};
  /// Names this locker's holders in their holder records
  /// (LockOptions::holder_label): `lockon status` and `lockon list` show it
  /// beside host and pid. Empty (the default): no label.
  std::string holder_label{};
};

/// Which functions share a lock.
enum class KeyScope {
  /// <prefix>:<md5(name)>:lock|<md5(args)> — one lock per function and
  /// argument values (the default).
  function,
  /// <prefix>:entity:lock|<md5(args)> — the function identity is dropped:
  /// every function locking the same argument values shares the lock, e.g.
  /// withdraw(card) and deposit(card) exclude each other.
  entity,
};

/// Per-function options of lock_on / try_lock_on.
struct LockOnOptions {
  KeyScope scope = KeyScope::function;
  /// Replaces the locker's policy for this function (validated by lock_on).
  /// try_lock_on waits only as this policy says: without it, one immediate
  /// try (as std::mutex::try_lock), whatever the locker's policy.
  std::optional<LockerPolicy> policy{};
  /// Reentrancy on request. false (the default): a locked call that, on the
  /// same thread, calls a locked function on a key this thread already holds
  /// fails at once, nothing sent: lock_on throws HeldByThisThread (waiting
  /// could only end at the policy's timeout), try_lock_on returns empty
  /// (busy). true: such a nested call of THIS function runs at
  /// once under the enclosing call's lock, without acquiring or releasing
  /// (LockContext then describes the enclosing lock; attempts() is 0). Holds
  /// are recorded per thread and per locker backend (copies and
  /// with_policy() share it); the enclosing call need not opt in. For
  /// lock_on_each, keys this thread holds are skipped and the others
  /// acquired — only keys that sort after every held one keep the
  /// deadlock-freedom argument, so prefer nesting on the same keys.
  bool reentrant = false;
};

/// Produces lock objects: the backend of a RedisLocker. Called with the key
/// and the options derived from the policy; must return a fresh, unlocked
/// lock (never null). Called concurrently from every thread that uses the
/// locker. The locker reuses a lock object for later calls on the same key
/// (it keeps a few idle ones, destroyed with the locker), so the factory
/// runs only when no idle lock for the key is at hand.
using LockFactory = std::function<std::unique_ptr<DistributedLock>(std::string key, LockOptions options)>;

namespace detail {

/// A validated policy and the LockOptions it implies.
struct PreparedPolicy {
  LockerPolicy policy;
  LockOptions lock_options;
  std::uint64_t id = 0;  // unique per prepare() call in this process (never reused)

  /// Throws ConfigError naming the bad field.
  static PreparedPolicy prepare(LockerPolicy policy);
};

/// Idle lock objects of one locker, for reuse by later calls on the same key
/// (saves constructing a lock and hashing its key). Thread-safe; bounded.
class IdleLocks;

/// The shared state of a RedisLocker (immutable once built, except for the
/// internally synchronized pool of idle locks).
struct LockerCore {
  LockFactory make_lock;
  PreparedPolicy prepared;
  std::shared_ptr<IdleLocks> idle;
  std::uint64_t backend = 0;  // identifies the lock backend (shared by with_policy) for reentrancy
};

/// What one call needs besides the function and its arguments.
struct CallSite {
  const LockerCore& core;
  const PreparedPolicy& policy;
  std::string_view function_name;
  std::string_view digest;  // md5hex of the function name, empty for KeyScope::entity
  bool reentrant = false;    // LockOnOptions::reentrant
  bool own_policy = false;   // LockOnOptions::policy was given (try_ calls wait only then)
};

/// The result of the acquisition loop.
struct Acquisition {
  std::unique_ptr<DistributedLock> lock;  // null when busy and !throw_on_busy
  int attempts = 0;
  std::string encoded_args;  // kept to file the lock as idle afterwards
  std::chrono::steady_clock::time_point acquired_at{};  // for the hold-time metric
  bool reusable = true;  // file the lock as idle afterwards (false for lock_on_each's MultiLock)
  /// Reentrancy: the enclosing call's lock this thread already holds (then
  /// `lock` is null and nothing was acquired).
  DistributedLock* reentered = nullptr;
};

/// Takes an idle lock for the key of `encoded_args` (encode_args of the
/// selected arguments) or makes one, and runs the attempt loop described at
/// the top of this file. Busy: throws AcquireTimeout / RetriesExhausted, or
/// returns a null lock when !throw_on_busy. Infrastructure errors propagate
/// as thrown by the lock (IoError, ReplyError, QuorumError...).
Acquisition acquire(const CallSite& site, std::string encoded_args, bool throw_on_busy);

/// This thread's spare string for encoding a call's arguments (empty, with
/// the storage of an earlier call's encoding when there is one): the idle
/// lock a call takes hands its copy of the same bytes back here, so the
/// uncontended lock_on cycle encodes without allocating.
std::string take_encoding_buffer() noexcept;

/// lock_on_each: the KeyScope::entity key of each encoded argument, taken
/// all or nothing as one MultiLock under the same attempt loop.
Acquisition acquire_each(const CallSite& site, const std::vector<std::string>& encoded_args, bool throw_on_busy);

/// Records, for reentrancy, that this thread holds `lock` (taken through
/// `core`) until destroyed. Never throws (out of memory: not recorded).
class HeldByThread {
 public:
  HeldByThread(const LockerCore& core, DistributedLock* lock) noexcept;
  ~HeldByThread();
  HeldByThread(const HeldByThread&) = delete;
  HeldByThread& operator=(const HeldByThread&) = delete;

 private:
  bool recorded_ = false;
};

/// Files the (released) lock of `acquired` as idle for reuse. Never throws.
void recycle(const CallSite& site, Acquisition&& acquired) noexcept;

}  // namespace detail
}  // namespace lockon
