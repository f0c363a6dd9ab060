// lockon/read_write_lock.hpp — a distributed read-write lock on one Redis
// server (or Sentinel master, or Cluster slot master).
//
// `lockon::ReadWriteLock` satisfies *TimedLockable* for the writer side
// (`std::unique_lock`, `std::scoped_lock`) and *SharedTimedLockable* for
// the reader side (`std::shared_lock`, try_lock_shared_for/until).
//
// Leases: each reader's share and the writer's hold is a lease of its own
// (options.ttl), renewed by lockon's watchdog while held. A reader or writer
// whose process crashes gives its share back when its lease ends; a waiter
// looks again at that moment, so it gets in within ttl plus a few ms.
//
// Policy (FIFO, writer preference): a newcomer gets in at once only when
// nobody is waiting and it fits (a reader: no writer holds; a writer: nobody
// holds). Otherwise it queues. So once a writer waits, new readers queue
// behind it: a continuous stream of readers cannot starve a writer. A writer
// waits at most for the readers holding when it queued to finish (a crashed
// one: until its lease ends), plus the waiters queued ahead of it. A release
// hands over to the head of the queue: a writer alone, or all consecutive
// readers at the head together.
//
// Keys for a name K (same hash slot as K): "{K}:sh" (holders, a sorted set
// scored by lease end in the server's clock), "{K}:sq" (the waiters' queue).
// Not wire-compatible with a plain lockon::Lock on K, nor with Redisson.
//
// Not provided: fencing tokens, reentrancy, upgrade/downgrade (a held share
// must be released before taking the write side and vice versa), no-expiry
// holds. As with any lease, a holder paused longer than its ttl may find its
// share gone (lost() turns true; on_lost is called).
//
// Thread use: one thread at a time per object, like a std::unique_lock; each
// thread (or process) that reads or writes uses its own ReadWriteLock object
// for the same name. Objects for the same name may be used concurrently.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <stop_token>
#include <string>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "lockon/shared_lease.hpp"

namespace lockon {

using ReadWriteLockOptions = SharedLeaseOptions;

class ReadWriteLock {
 public:
  using Clock = std::chrono::steady_clock;

  /// Validates without I/O: ConfigError for an empty name or one over
  /// kMaxNameBytes (64 KiB, lockon/name.hpp), a ttl ≤ 0 or over 2^40 ms, a
  /// non-positive wait_poll_interval.
  ReadWriteLock(Client client, std::string name, ReadWriteLockOptions options = {});
  /// Releases whatever this object holds (noexcept).
  ~ReadWriteLock();
  ReadWriteLock(const ReadWriteLock&) = delete;
  ReadWriteLock& operator=(const ReadWriteLock&) = delete;

  // --- writer (exclusive) side ---

  /// Blocks until this object holds the lock exclusively. Throws LockError
  /// if this object already holds it (either side), IoError/ReplyError on
  /// infrastructure failure.
  void lock();
  /// One attempt, never waits (and never queues). Returns false if held by
  /// others or if others are waiting. Throws as lock().
  bool try_lock();
  /// Waits at most `timeout` (the queue place is given up on timeout).
  /// Returns false on timeout. Throws as lock().
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(false, detail::deadline_after(timeout));
  }
  template <class C, class D>
  bool try_lock_until(const std::chrono::time_point<C, D>& deadline) {
    return acquire(false, detail::deadline_at(deadline));
  }
  /// Releases the exclusive hold; never throws (a failure is recorded in
  /// last_unlock_error() and declares the lease lost). No-op when not held.
  void unlock() noexcept;

  // --- reader (shared) side ---

  /// Blocks until this object holds a share. Throws as lock().
  void lock_shared();
  /// One attempt, never waits. Returns false if a writer holds or anyone
  /// waits. Throws as lock().
  bool try_lock_shared();
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire(true, detail::deadline_after(timeout));
  }
  template <class C, class D>
  bool try_lock_shared_until(const std::chrono::time_point<C, D>& deadline) {
    return acquire(true, detail::deadline_at(deadline));
  }
  /// Releases the share; never throws (as unlock()).
  void unlock_shared() noexcept;

  // --- both sides ---

  /// Releases whichever side is held, reporting failure. Throws:
  ///   LockError        if this object holds neither side;
  ///   LockNotOwned     if the lease had ended before the release;
  ///   ServerBusyError  (a ReplyError) if Redis kept refusing for now for
  ///                    the socket timeout (at least 1 s): TRYAGAIN while
  ///                    the name's Cluster slot migrates, CLUSTERDOWN, ...
  ///                    (ASK, MOVED and TRYAGAIN are followed until then);
  ///   IoError          if the server could not be reached or did not
  ///                    answer (the outcome is unknown);
  ///   ReplyError       for any other error reply.
  /// On ServerBusyError, IoError and ReplyError the release is retried in
  /// the background until it runs (the share does not block the name until
  /// its ttl) and the lease is declared lost (on_lost, lost_token()). The
  /// local state is cleared in every case. Note: unlike
  /// Semaphore::release(), which never throws (its throwing form is
  /// Semaphore::release_or_throw()).
  void release();
  /// Which side this object holds (local state, no round trip).
  bool held() noexcept;
  bool held_shared() noexcept;
  /// True once the current (or last) hold's lease was declared lost, or its
  /// provable end has passed. Local, no round trip.
  bool lost() const noexcept;
  /// Requested-stop when the current hold's lease is lost.
  std::stop_token lost_token() const noexcept;
  std::exception_ptr last_unlock_error() const noexcept;
  const std::string& name() const noexcept;

 private:
  bool acquire(bool shared, Clock::time_point deadline);
  std::unique_ptr<detail::SharedHolder> writer_;
  std::unique_ptr<detail::SharedHolder> reader_;
  detail::SharedHolder* last_ = nullptr;  // the side acquired last
};

}  // namespace lockon
