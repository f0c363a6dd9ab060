// lockon/semaphore.hpp — a distributed counting semaphore whose permits
// expire (like Redisson's RPermitExpirableSemaphore, `consul lock -n`).
//
// `Semaphore(client, name, permits)`: at most `permits` holders of `name` at
// a time, across threads and processes. Each held permit is a lease of its
// own (options.ttl), renewed by lockon's watchdog while held; a holder whose
// process crashes gives its permit back when the lease ends (Redisson
// #4462's leak cannot happen), and a waiter looks again at that moment.
//
// Fairness: FIFO. A newcomer takes a permit at once only when one is free
// and nobody waits; a released (or expired) permit goes to the waiter at the
// head of the queue, with no polling (pub/sub hand-over, like lockon::Lock).
//
// Every user of a name must pass the same `permits`: the count is not
// stored in Redis (each script checks against the caller's value).
// Keys for a name K (same hash slot as K): "{K}:sh", "{K}:sq", as for
// ReadWriteLock (so a name is either a semaphore or a read-write lock).
//
// Not provided: fencing tokens, acquiring several permits in one call.
//
// Thread use: an object holds at most one permit and is used by one thread
// at a time; each thread (or process) that needs a permit uses its own
// Semaphore object for the same name.
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

using SemaphoreOptions = SharedLeaseOptions;

class Semaphore {
 public:
  using Clock = std::chrono::steady_clock;

  /// Validates without I/O: ConfigError for permits < 1, an empty name or
  /// one over kMaxNameBytes (64 KiB, lockon/name.hpp), a ttl ≤ 0 or over
  /// 2^40 ms, a non-positive wait_poll_interval.
  Semaphore(Client client, std::string name, long long permits, SemaphoreOptions options = {});
  /// Releases the permit if held (noexcept).
  ~Semaphore();
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  /// Blocks until this object holds a permit. Throws LockError if it holds
  /// one already, IoError/ReplyError on infrastructure failure.
  void acquire();
  /// One attempt, never waits (and never queues). Returns false if no
  /// permit is free or others are waiting. Throws as acquire().
  bool try_acquire();
  /// Waits at most `timeout`; returns false on timeout (the queue place is
  /// given up). Throws as acquire().
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& timeout) {
    return acquire_until(detail::deadline_after(timeout));
  }
  template <class C, class D>
  bool try_acquire_until(const std::chrono::time_point<C, D>& deadline) {
    return acquire_until(detail::deadline_at(deadline));
  }
  /// Gives the permit back; never throws. A failure is recorded in
  /// last_unlock_error() and declares the lease lost; the release is then
  /// retried in the background (release_or_throw() lists the failures).
  /// No-op when not held.
  void release() noexcept;
  /// release() reporting failure. Throws LockError if not held,
  /// LockNotOwned if the lease had ended, and as ReadWriteLock::release()
  /// when the release could not be confirmed: ServerBusyError (TRYAGAIN
  /// while the name's Cluster slot migrates, CLUSTERDOWN, ... for the
  /// socket timeout, at least 1 s), IoError (unreachable, outcome unknown),
  /// another ReplyError. In those three cases the release is retried in
  /// the background until it runs and the lease is declared lost.
  void release_or_throw();

  /// Lockable spelling (std::unique_lock<Semaphore>, std::scoped_lock).
  void lock() { acquire(); }
  bool try_lock() { return try_acquire(); }
  void unlock() noexcept { release(); }

  /// Whether this object holds a permit (local state, no round trip).
  bool held() noexcept;
  /// True once the permit's lease was declared lost or its provable end has
  /// passed. Local.
  bool lost() const noexcept;
  std::stop_token lost_token() const noexcept;
  std::exception_ptr last_unlock_error() const noexcept;
  const std::string& name() const noexcept;
  long long permits() const noexcept { return permits_; }

 private:
  bool acquire_until(Clock::time_point deadline);
  long long permits_;
  std::unique_ptr<detail::SharedHolder> holder_;
};

}  // namespace lockon
