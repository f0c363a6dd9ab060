// lockon/multi_lock.hpp — several keys locked all or nothing, deadlock-free
// in any argument order.
//
//   lockon::MultiLock both(client, {"acct:b", "acct:a"}, {.fencing = true});
//   std::scoped_lock guard(both);          // holds acct:a AND acct:b, or waits
//   ledger.move(both.fence(0), both.fence(1), ...);
//
// HOW: the keys are sorted and deduplicated, then (unless one script takes
// them all at once, see ONE SCRIPT FIRST) taken one by one in that order with one ordinary lock object per key (lockon::Lock, or whatever the
// factory makes). Each key is an ordinary lock key: a plain Lock on "acct:a"
// and a MultiLock over {"acct:a", "acct:b"} exclude each other, and each key
// keeps its FIFO queue, notifications and renewal.
//
// ONE SCRIPT FIRST: when every key can be reached by one script — the
// Client constructor (or a factory making plain lockon::Locks on one
// Client with the same options), no replica_acks, and on a Redis Cluster
// every key in ONE hash slot (give them a common hash tag: "{acct}:a",
// "{acct}:b") — an acquisition first tries a single script (one round
// trip for all N keys): only if every key is free AND has nobody queued in
// its FIFO queue does it set every key to one token with the ttl, raise
// each key's fence and write each key's holder record; otherwise it
// changes nothing. On one server or behind Sentinel every key lives on the
// one master, so the keys' slots do not matter there; on a Cluster keys in
// different slots (possibly on different nodes) always take the ordered
// path. Each key's Lock adopts its part of the acquisition (lease counted
// from the script's send time, renewal, release: exactly as if it had won
// the key itself). When a key is busy the acquisition continues with the
// ordered path below (try_lock() simply fails when a key is held); a
// queued waiter is never jumped. One key alone keeps the Lock's own path.
// A contended acquisition thus pays the failed script (one round trip)
// before it queues. With a custom LockOptions::token every key holds it.
//
// DEADLOCK FREEDOM: every MultiLock takes its keys in the same global order
// (byte-wise string order) and waits for a key only while holding keys that
// sort before it; a plain lock holds a single key. A cycle of waiters would
// need someone waiting for a key smaller than one it holds, which never
// happens, so some holder can always finish — whatever order the caller
// listed the keys in (transfer(a, b) and transfer(b, a) alike).
//
// ALL OR NOTHING: when a key cannot be had before the deadline (or an
// error occurs), the keys already taken are released in reverse order before
// the call returns false (or throws); nobody ever observes a half-taken
// MultiLock as held. The deadline is shared by all keys, not per key, and
// bounds the give-back too: the releases wait for their replies until the
// deadline (past it, 25 ms at most), and one not confirmed by then is left
// to the background clean-up, which releases the key if it still holds
// this object's token (a Cluster answering CLUSTERDOWN during a failover
// held a 2 s try_lock_for for up to 2.9 s before). busy_key() names the key
// that was still held when the call gave up.
// An earlier key's lease runs on while a later key is awaited; when all are
// taken, every key must prove at least half a lease left (a single Lock's
// rule for its own grant): a key with less is confirmed by one round trip
// (reacquire()), and a key whose lease ended meanwhile (auto_renew off with
// a ttl shorter than the wait, failed renewals) voids the grant: every key
// is released and the acquisition starts again while the deadline allows.
// A MultiLock is never reported held with lost() already true.
// A MultiLock does not keep FIFO queue places between attempts
// (LockOptions::keep_queue_place is ignored): a place kept on a later key
// while an earlier one is released could hand the later key over and invert
// the order.
//
// FENCING (LockOptions::fencing): every key has its own fence counter, so an
// acquisition carries one fence per key, fence(i) for the i-th name given to
// the constructor. Each key's fences strictly increase from one acquisition
// of that key to the next (by anyone: Lock or MultiLock); fences of
// different keys are unrelated. A resource guarded by key K must check K's
// fence.
//
// LOSS: a lost lease on any key (renewal found it taken, renewals failed,
// release failed) declares the whole MultiLock lost: lost(), lost_token()
// and LockOptions::on_lost (called once, LossEvent::name = name(), detail
// naming the key). Renewal is per key, by the shared watchdog. lost() is
// also true as soon as any key's lease end has passed by this process's
// clock, before the watchdog has confirmed it (a holder paused past its
// TTL sees lost() on resuming; tested with SIGSTOP).
//
// Backends: the Client constructor makes single-instance Locks (any
// topology; in a Cluster the keys may sit in different slots, which then
// take the ordered path). The factory
// constructor accepts any DistributedLock backend (Redlock included): the
// ordering argument above holds for any mutual-exclusion lock per key.
//
// Thread use: as lockon::Lock — one thread at a time per object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/policy.hpp"

namespace lockon {

/// N keys as one TimedLockable lock (see the top of this file).
class MultiLock final : public DistributedLock {
 public:
  /// Single-instance Locks on `client`. Validates without I/O: throws
  /// ConfigError for no names, an empty name or one over kMaxNameBytes
  /// (64 KiB each, lockon/name.hpp), or options a Lock rejects.
  /// Duplicate names are locked once (fence(i) is the same for both).
  MultiLock(Client client, std::vector<std::string> names, LockOptions options = {});

  /// Keys through `make_lock(key, options)` (a RedisLocker backend; must
  /// return a fresh unlocked lock per call). Throws ConfigError as above or
  /// for a null factory / lock.
  MultiLock(std::vector<std::string> names, LockOptions options, const LockFactory& make_lock);

  /// Releases if held (noexcept).
  ~MultiLock() override;

  /// Releases every key in reverse order, also when one fails. Throws
  /// LockError if not held, LockNotOwned if some key had been lost (the
  /// others are released all the same; the lease is declared lost), IoError
  /// if a server could not be reached. The local state is cleared either way.
  void release() override;
  /// extend() / reacquire() every key; throws on the first failure like
  /// Lock's (LockError when not held, LockNotOwned when a key was lost).
  void extend(std::chrono::milliseconds additional, bool replace_ttl = false) override;
  void reacquire() override;
  /// True if every key holds this object's token (one round trip per key).
  bool owned() override;
  /// True if any key is held by anyone (one round trip per key).
  bool locked() override;
  /// The smallest remaining TTL over the keys; nullopt if any key is absent.
  std::optional<std::chrono::milliseconds> remaining_ttl() override;
  void abandon_wait() noexcept override;

  /// How many names were given to the constructor (duplicates included).
  std::size_t size() const noexcept { return positions_.size(); }
  /// The i-th name as given (i < size()).
  const std::string& name(std::size_t i) const;
  using DistributedLock::name;  // name(): the distinct names, in the order given, joined by ','
  /// The fence of the i-th given name in the current acquisition (0 without
  /// fencing). Throws std::out_of_range for i >= size(). fence() (no
  /// argument) is fence(0).
  std::uint64_t fence(std::size_t i) const;
  using DistributedLock::fence;
  /// fence(i) for every i, in constructor order.
  std::vector<std::uint64_t> fences() const;
  /// The distinct keys, in acquisition (sorted) order.
  std::vector<std::string> keys() const;
  /// After an acquisition that returned false: the key it was still
  /// waiting for when it gave up (held by another owner, or its server did
  /// not answer in time); empty otherwise, and after a single one-script
  /// attempt, whose reply does not say which key was held. Local.
  const std::string& busy_key() const noexcept;

 protected:
  bool acquire_until(Clock::time_point deadline) override;

 private:
  struct Relay;
  void build(std::vector<std::string> names, const LockFactory& make_lock);
  // Gives back the first `count` keys, waiting for them no later than the
  // acquisition's deadline allows (multi/give_back.hpp).
  void release_taken(std::size_t count, Clock::time_point deadline) noexcept;
  bool on_taken();
  std::vector<const DistributedLock*> key_locks() const;

  std::vector<std::unique_ptr<DistributedLock>> locks_;  // sorted by key, distinct
  std::vector<std::size_t> positions_;                   // constructor index -> locks_ index
  std::shared_ptr<Relay> relay_;                         // forwards per-key losses
  bool one_script_ = false;                              // all keys in one script first (see above)
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t busy_ = kNone;                             // locks_ index busy_key() names, or kNone
};

}  // namespace lockon
