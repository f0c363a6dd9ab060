// lockon/lock_context.hpp — what a function running under lock_on can know
// about the lock it runs under.
//
// A function whose first parameter is `lockon::LockContext&` (or `const&`)
// gets one injected by lock_on; the caller does not pass it and argument
// positions do not count it:
//
//   int withdraw(lockon::LockContext& lock, const std::string& card, int amount) {
//     ledger.append(card, -amount, lock.fence());   // the ledger rejects stale fences
//     return balance(card);
//   }
//   auto locked = locker.lock_on<0>("bank::withdraw", &withdraw);
//   locked("card-1", 100);                          // lock key from "card-1"
//
// For a member function it is the first parameter after the object:
// `int Account::withdraw(lockon::LockContext&, int)` is called as
// `locked(account, 100)`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stop_token>
#include <string>
#include <string_view>

#include "lockon/lock.hpp"

namespace lockon {

namespace detail {
struct ContextAccess;
}

/// The lock held for one lock_on call. Lives exactly as long as the call;
/// neither copyable nor movable. Use it from the calling thread (stop_token()
/// may be handed to helper threads).
class LockContext {
 public:
  LockContext(const LockContext&) = delete;
  LockContext& operator=(const LockContext&) = delete;

  /// The Redis key of the lock (see lockon/key.hpp). Never blocks.
  const std::string& key() const noexcept { return lock_.name(); }

  /// The name given to lock_on / decorate ("bank::withdraw").
  std::string_view function_name() const noexcept { return function_name_; }

  /// The fence of this acquisition: strictly greater than that of every
  /// earlier acquisition of the same key. 0 unless LockerPolicy::fencing.
  /// Pass it to resources that reject stale writers. Never blocks.
  std::uint64_t fence() const noexcept { return lock_.fence(); }

  /// lock_on_each: the fence of the key of the i-th selected argument (in
  /// position order). Each key has its own fences, strictly increasing per
  /// key; fences of different keys are unrelated. For a single-key lock,
  /// fence(0) == fence(). Throws std::out_of_range for a bad i.
  std::uint64_t fence(std::size_t i) const;

  /// True once the lease was declared lost (expired, deleted, taken, or
  /// unrenewable). Local flag set by lockon's watchdog; never blocks. When it
  /// is true the call will throw LockLost after the function returns, so
  /// long-running work should stop early.
  bool lost() const noexcept { return lock_.lost(); }

  /// Stop is requested when the lease is lost (with auto_renew off also
  /// when the ttl simply runs out: the watchdog watches that end too): poll
  /// it or attach a std::stop_callback. Never blocks.
  std::stop_token stop_token() const noexcept { return lock_.lost_token(); }

  /// How much of the lease is left, for deciding whether to start a long step.
  ///
  /// Single-instance lock: one round trip (PTTL of the key), so with
  /// auto-renewal it reflects the renewals. 0 if the lease is lost or the key
  /// is gone (lost() is checked first, locally, because PTTL alone cannot
  /// tell our key from a successor's). Redlock: local, no round trip — the
  /// guaranteed validity (validity_deadline() − now), which already allows
  /// for clock drift. Throws IoError/ReplyError/QuorumError if the server(s)
  /// cannot answer.
  std::chrono::milliseconds remaining() const;

  /// How many attempts the acquisition took (1 = the first one succeeded).
  int attempts() const noexcept { return attempts_; }

  /// The underlying lock, e.g. to extend() the lease by hand. Do not unlock
  /// or release it: lock_on does that when the function returns.
  DistributedLock& lock() const noexcept { return lock_; }

  /// Throws LockLost (name() = key()) if the lease was lost; no-op
  /// otherwise. lock_on calls it after the function returned; call it
  /// yourself before an irreversible step.
  void throw_if_lost() const;

 private:
  friend struct detail::ContextAccess;
  LockContext(DistributedLock& lock, std::string_view function_name, int attempts) noexcept
      : lock_(lock), function_name_(function_name), attempts_(attempts) {}

  DistributedLock& lock_;
  std::string_view function_name_;
  int attempts_;
};

namespace detail {
/// lockon-internal: creates contexts (the constructor is private so user
/// code cannot forge one).
struct ContextAccess {
  static LockContext make(DistributedLock& lock, std::string_view function_name, int attempts) noexcept {
    return LockContext(lock, function_name, attempts);
  }
};
}  // namespace detail

}  // namespace lockon
