// lockon/lock.hpp — distributed locks with a lease, renewal, fencing and a
// lease-loss signal.
//
// `lockon::Lock` is the single-instance Redis lock: `SET key token NX PX ttl`,
// released by a Lua compare-and-delete, wire-compatible with redis-py's
// `Lock` and node-redlock on the same key. `lockon::Redlock`
// (lockon/redlock.hpp) has the same surface over N masters; both derive from
// `lockon::DistributedLock`, the interface `RedisLocker` and the CLI use.
//
// Both satisfy the standard *TimedLockable* requirements, so
// `std::unique_lock`, `std::scoped_lock`, `std::lock` and
// `try_lock_for/until` work as with `std::timed_mutex`.
//
// Thread use: one thread at a time per lock object (like a `std::unique_lock`);
// moving the object to, or using it from, another thread in turn is fine.
// Different objects — even for the same key — may be used concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"

namespace lockon {

/// Why a held lease was declared lost.
enum class LossReason {
  taken,        // the key vanished or holds another token (expired, deleted, stolen)
  unreachable,  // renewals failed with I/O errors until the lease could have lapsed
  max_hold,     // the configured maximum hold time ended renewal and the lease ran out
};

/// "taken", "unreachable" or "max_hold": the enumerator's name, for logs
/// and metrics labels.
std::string_view to_string(LossReason reason) noexcept;

/// Passed to LockOptions::on_lost.
struct LossEvent {
  std::string name;        // the lock key
  LossReason reason;
  std::string detail;      // human-readable cause (never contains the token)
};

/// Replica acknowledgement of a grant (`WAIT replicas timeout`), see
/// LockOptions::replica_acks.
struct ReplicaAcks {
  /// Replicas that must acknowledge; 0 = off (no WAIT). Must be >= 0.
  int replicas = 0;
  /// How long to wait for them. Must be > 0 when replicas > 0 (WAIT 0
  /// would block forever).
  std::chrono::milliseconds timeout{100};
};

/// Options of one lock. Plain aggregate with documented defaults.
struct LockOptions {
  /// Lease length. Must be > 0 and ≤ 2^47 ms, unless `no_expiry` is set.
  std::chrono::milliseconds ttl{30'000};
  /// Explicit opt-in to a key without expiry (survives a crashed holder!).
  /// Then `ttl` is ignored and extend/reacquire/renewal are unavailable.
  bool no_expiry = false;
  /// A process-wide watchdog thread renews the lease every ttl/3 while held.
  /// Without renewal the lease ends ttl after the acquisition's request was
  /// sent (or where extend()/reacquire() moved it), and the watchdog then
  /// declares it lost (lost_token() stopped, on_lost with LossReason::taken)
  /// within a few milliseconds; no round trip is made for that.
  bool auto_renew = true;
  /// With auto_renew: stop renewing this long after acquisition (0 = never
  /// stop). The lease then runs out and the lock is reported lost.
  std::chrono::milliseconds max_hold{0};
  /// Produce a strictly increasing 64-bit fence per acquisition (fence()).
  bool fencing = false;
  /// Caller-supplied token; unset means 128 random bits (OpenSSL RAND_bytes)
  /// in hex, fresh for each acquisition, then '.' and a 48-bit random nonce
  /// of this process ("<32 hex>.<12 hex>"): a waiter queued behind a holder
  /// of its own process tells so from the token alone, so a paused process
  /// costs its waiters one lease in all (README, "Liveness after faults");
  /// a custom token needs holder_record for that. Must not be empty if set. A custom
  /// token must identify ONE holder: acquiring while the key already holds
  /// it (another Lock object with the same token, an acquisition never
  /// released) throws LockError instead of sharing the lock. With a custom
  /// token an acquisition whose reply was lost is not retried (it could not
  /// tell its own grant from another holder's); it throws IoError. The
  /// background clean-ups of this process's earlier attempts with the token
  /// on the same key (a lost reply, a timeout; through any Client — those
  /// filed through another address get 100 ms, then go on in the
  /// background; an AsyncLock's only through the same AsyncClient) run once
  /// before a new acquisition with it and never after it; if they cannot
  /// run, the acquisition throws ConnectError (a try_lock_for whose
  /// deadline passes meanwhile returns false).
  std::optional<std::string> token{};
  /// Safety net while waiting: the longest sleep between two attempts when
  /// no notification arrives (subscriber down, holder crashed). Must be > 0.
  std::chrono::milliseconds wait_poll_interval{250};
  /// A queued waiter that is its process's only waiter on the server, when
  /// its turn is expected soon (from its place in the queue and how often
  /// this process saw the key change hands), polls its wake-up socket
  /// instead of sleeping, yielding the CPU between looks: the hand-over is
  /// then seen without a scheduler wake-up on the lock's critical path
  /// (at 4 processes on one key, ~1.4x the critical sections per second for
  /// ~1.9x the client CPU; docs/benchmarks.md). It polls for at most
  /// handoff_spin per wait, ending one turn after the expected hand-over,
  /// and only on keys that change hands at least every handoff_spin.
  /// 0: always sleep (no CPU spent waiting). Must be ≥ 0.
  std::chrono::microseconds handoff_spin{1000};
  /// A timed attempt (try_lock_for/until) that gives up keeps this object's
  /// place in the FIFO queue, and the next attempt on the same object
  /// continues from it instead of queueing again at the tail; lock_on's
  /// retry windows use this. abandon_wait(), a successful acquisition or
  /// destruction gives the place up. Between attempts the lock may be
  /// handed to this object: the next attempt then returns at once.
  bool keep_queue_place = false;
  /// Record who holds the lock for `lockon status`: each acquisition writes
  /// "host, pid, process start, holder_label, since" to the companion key
  /// lock_companion_key(name, "who"), in the same round trip as the grant
  /// (hand-overs write it inside the release script), with the lease's
  /// expiry; release deletes it. false: no record (one command less).
  bool holder_record = true;
  /// Free text shown as the holder's label ('|' and control characters
  /// become '_'; cut at 64 bytes). `lockon run --label`.
  std::string holder_label{};
  /// Called once when a held lease is lost: from lockon's watchdog thread
  /// (renewal found the key taken, renewals failed until the lease could
  /// have lapsed, or, without auto_renew, the lease's end passed), or from the thread calling unlock()/release() when the
  /// release fails. No lockon mutex is held while it runs, so it may unlock
  /// other locks; keep it short, and do not call into the same lock object.
  std::function<void(const LossEvent&)> on_lost{};
  /// Before an acquisition (and every hand-over to this object) is reported
  /// acquired, `replica_acks.replicas` replicas must have acknowledged it
  /// within `replica_acks.timeout` (Redis `WAIT`, on the connection that
  /// made the grant's last write). Otherwise the lock is released and
  /// ReplicationError says how many acknowledged. Narrows, does not close,
  /// the window in which a failover loses a grant: WAIT is not consensus.
  /// AsyncLock (and async_lock_on) rewrite the grant and WAIT on a
  /// connection of the client's own, so the shared one is never held up;
  /// on a Redis Cluster they refuse it with ConfigError.
  ReplicaAcks replica_acks{};
};

/// The common surface of Lock and Redlock (TimedLockable).
class DistributedLock {
 public:
  using Clock = std::chrono::steady_clock;

  virtual ~DistributedLock();
  DistributedLock(const DistributedLock&) = delete;
  DistributedLock& operator=(const DistributedLock&) = delete;

  /// Blocks until acquired. Throws LockError if this object already holds
  /// the lock, IoError/ReplyError on infrastructure failure.
  void lock();

  /// One attempt, never waits. Returns false if someone else holds it.
  /// Throws as lock().
  bool try_lock();

  /// Waits at most `timeout`. Returns false on timeout. Never oversleeps it
  /// by more than one round trip, except for (re)connecting, which is
  /// bounded by connect_timeout: a reply still missing at the deadline (a
  /// stalled server) is given up, and whatever that request may still win
  /// is released, and its queue place removed, by a background clean-up.
  /// Throws as lock(); also TimeoutError when a reply misses the socket
  /// timeout before the deadline.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    if (timeout <= timeout.zero()) return acquire_until(Clock::time_point::min());
    // A timeout past the clock's range (e.g. milliseconds::max()) waits forever
    // instead of wrapping into the past.
    const auto now = Clock::now();
    const auto room = std::chrono::duration_cast<std::chrono::duration<double, Period>>(Clock::time_point::max() - now);
    if (static_cast<double>(timeout.count()) >= room.count()) return acquire_until(Clock::time_point::max());
    return acquire_until(now + std::chrono::ceil<Clock::duration>(timeout));
  }

  /// Waits until `deadline` of any clock. Returns false if it passed.
  template <class C, class D>
  bool try_lock_until(const std::chrono::time_point<C, D>& deadline) {
    if constexpr (std::is_same_v<C, Clock>) {
      return acquire_until(deadline <= C::now() ? Clock::time_point::min()
                                                : std::chrono::time_point_cast<Clock::duration>(deadline));
    } else {
      return try_lock_for(deadline - C::now());
    }
  }

  /// Releases if held; never throws. Renewal stops before the release
  /// script runs. A failure (lease already lost, server unreachable) is
  /// recorded in last_unlock_error() and declares the lease lost (lost(),
  /// on_lost): a lease whose release failed cannot be proven to have been
  /// held to its end. A release that could not be sent is retried in the
  /// background (else the key expires by its TTL). No-op when not held.
  void unlock() noexcept;

  /// Releases, reporting failure: LockError if not held by this object,
  /// LockNotOwned if the key expired or holds another token (the local state
  /// is cleared either way), IoError if the server could not be reached.
  virtual void release() = 0;

  /// Adds `additional` to the remaining TTL (or replaces the TTL with it when
  /// `replace_ttl`). Throws LockError when not held or for a no-expiry lock,
  /// LockNotOwned when no longer owned, ConfigError for additional ≤ 0.
  virtual void extend(std::chrono::milliseconds additional, bool replace_ttl = false) = 0;

  /// Resets the TTL to the lock's ttl. Throws like extend().
  virtual void reacquire() = 0;

  /// Gives up a queue place kept by LockOptions::keep_queue_place (no-op
  /// otherwise). Never throws; a removal that fails is retried in the
  /// background.
  virtual void abandon_wait() noexcept {}

  /// Asks Redis whether the key holds this object's token (one round trip).
  virtual bool owned() = 0;
  /// Asks Redis whether anyone holds the key.
  virtual bool locked() = 0;
  /// The key's remaining TTL; nullopt if the key does not exist;
  /// milliseconds::max() if it has no expiry.
  virtual std::optional<std::chrono::milliseconds> remaining_ttl() = 0;

  /// True between a successful acquisition and unlock()/release() (local
  /// state, no round trip). Stays true after a loss until unlock.
  bool held() const noexcept;
  /// True once the current (or last) lease was declared lost, and also as
  /// soon as the lease end this process can prove (the send time of the
  /// acquisition or of the last confirmed renewal, plus the ttl) has passed:
  /// a holder that resumes after a pause longer than its lease sees true
  /// before the watchdog had a chance to look. Never turns true after a
  /// successful release. Local, no round trip.
  bool lost() const noexcept;
  /// Requested-stop when the current lease is lost; a fresh token per
  /// acquisition. Poll it or register a std::stop_callback.
  std::stop_token lost_token() const noexcept;
  /// The fence of the current acquisition (LockOptions::fencing), else 0.
  /// Fences of one key strictly increase from one acquisition to the next,
  /// including hand-overs, restarts of the server without persistence and
  /// failovers: a fence is max(previous + 1, the server's TIME in µs), so
  /// an emptied counter restarts above every earlier fence. Condition: the
  /// clock of the server answering (the new master after a failover) does
  /// not run behind the old one by more than the time between the two
  /// acquisitions. Fences are not consecutive.
  std::uint64_t fence() const noexcept;
  /// The lock key.
  const std::string& name() const noexcept;
  const LockOptions& options() const noexcept;
  /// The error recorded by the last unlock() that failed, else null.
  std::exception_ptr last_unlock_error() const noexcept;

 protected:
  struct State;
  DistributedLock(std::string name, LockOptions options);
  /// Single attempt when deadline == time_point::min(), forever when max().
  virtual bool acquire_until(Clock::time_point deadline) = 0;
  /// release(), waiting for the server until `deadline` at most: a release
  /// still unconfirmed then is left to the background clean-up (released if
  /// the key still holds this token) and the lease declared lost, without
  /// an error. For a caller past its own deadline (MultiLock giving back
  /// the keys it took). The default waits as release() does.
  virtual void release_until(Clock::time_point deadline) {
    (void)deadline;
    release();
  }
  /// unlock() through release_until(deadline). Never throws.
  void unlock_until(Clock::time_point deadline) noexcept;
  State& state() const noexcept { return *state_; }

 private:
  std::shared_ptr<State> state_;
};

namespace detail {
class OneScriptAcquisition;  // internal: MultiLock's single-script path (src/multi/one_script.hpp)
}  // namespace detail

/// A lock on one Redis server.
class Lock final : public DistributedLock {
 public:
  /// Validates without I/O: throws ConfigError for an empty name or one
  /// over kMaxNameBytes (64 KiB, lockon/name.hpp), a ttl ≤ 0 or over Redis'
  /// limit (unless no_expiry), an empty custom token, a non-positive
  /// wait_poll_interval.
  Lock(Client client, std::string name, LockOptions options = {});
  ~Lock() override;

  void release() override;
  void extend(std::chrono::milliseconds additional, bool replace_ttl = false) override;
  void reacquire() override;
  bool owned() override;
  bool locked() override;
  std::optional<std::chrono::milliseconds> remaining_ttl() override;
  void abandon_wait() noexcept override;

 protected:
  bool acquire_until(Clock::time_point deadline) override;
  void release_until(Clock::time_point deadline) override;

 private:
  // Internal: lets a MultiLock hand this Lock an acquisition it made for
  // several keys in one script (the Lock then renews and releases it).
  friend class detail::OneScriptAcquisition;
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// RAII: acquires in the constructor (blocking up to `timeout`), releases in
/// the destructor (noexcept). Throws AcquireTimeout if not acquired in time
/// (redis-py's "Unable to acquire lock within the time specified").
template <class L>
class LockGuard {
 public:
  explicit LockGuard(L& lock) : lock_(lock) { lock_.lock(); }
  LockGuard(L& lock, std::chrono::milliseconds timeout) : lock_(lock) {
    if (!lock_.try_lock_for(timeout))
      throw AcquireTimeout("unable to acquire lock '" + lock_.name() + "' within the time specified", lock_.name());
  }
  ~LockGuard() { lock_.unlock(); }
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

 private:
  L& lock_;
};

/// The name of a lock key's companion key `suffix` ("q" queue, "fence",
/// "who" holder record, "qwho" waiters' records), in the key's hash slot:
/// what `lockon status` reads. Same rule as the library's own keys.
std::string lock_companion_key(std::string_view key, std::string_view suffix);

}  // namespace lockon
