// lockon/locker.hpp — RedisLocker: lock a function on (some of) its arguments.
//
//   lockon::RedisLocker locker("redis://127.0.0.1:6379",
//                              {.max_retry = 3, .retry_delay = 2s, .timeout = 10s});
//
//   // Lock on argument 0 (the card): concurrent withdrawals from one card
//   // run one at a time, across threads and processes; other cards run freely.
//   auto withdraw = locker.lock_on<0>("bank::withdraw", &bank::withdraw);
//   int balance = withdraw("card-1", 100);     // same signature as bank::withdraw
//
//   // Busy is an ordinary outcome: empty instead of an exception.
//   auto try_withdraw = locker.try_lock_on<0>("bank::withdraw", &bank::withdraw);
//   if (std::optional<int> b = try_withdraw("card-1", 100)) { ... }
//
// The name is the function's identity in the key: it must be the same in
// every process that should exclude each other, and stable across builds
// (it is never derived from a compiler's spelling of the function). Keys,
// the call contract and what positions count: lockon/lock_on.hpp. Retry
// and deadline policy: lockon/policy.hpp. Compile-time declaration:
// lockon/decorate.hpp.
//
// Cost: an uncontended call is the lock's two round trips (acquire, release)
// plus encoding the selected arguments. The locker keeps a few idle lock
// objects (16) keyed by policy, function identity and encoded arguments, so
// a call on a recently used key neither constructs a lock nor hashes its key.
//
// Thread safety: a RedisLocker is a cheap handle (copies share the backend,
// policy and idle locks); every member may be called from any number of
// threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock_on.hpp"
#include "lockon/options.hpp"
#include "lockon/policy.hpp"
#include "lockon/redlock.hpp"

namespace lockon {

class RedisLocker {
 public:
  /// One Redis server at `url` (ConnectionOptions::from_url), single-instance
  /// locks (lockon::Lock). Does not connect; the first call does. Throws
  /// ConfigError for a bad URL, pool or policy.
  explicit RedisLocker(std::string_view url, LockerPolicy policy = {}, PoolOptions pool = {});

  /// Single-instance locks on `client`'s server (shares its pool). Throws
  /// ConfigError for a bad policy.
  explicit RedisLocker(Client client, LockerPolicy policy = {});

  /// Any backend: `make_lock(key, options)` must return a fresh unlocked
  /// lock for each call (see LockFactory). Throws ConfigError for an empty
  /// factory or a bad policy.
  explicit RedisLocker(LockFactory make_lock, LockerPolicy policy = {});

  /// Redlock over the independent masters at `urls` (one Client each, built
  /// now and shared by every call). Each call constructs a lockon::Redlock,
  /// which PINGs the nodes first (one parallel round trip) — see
  /// lockon/redlock.hpp for the algorithm and its caveats. Throws ConfigError
  /// for a bad URL or policy, or a server listed twice (the message names
  /// its endpoint, never a password); RedlockOptions are validated at the
  /// first call.
  static RedisLocker redlock(const std::vector<std::string>& urls, LockerPolicy policy = {},
                             RedlockOptions redlock_options = {}, PoolOptions pool = {});

  /// The same backend with another policy. Throws ConfigError for a bad one.
  RedisLocker with_policy(LockerPolicy policy) const;

  /// The policy given at construction (validated).
  const LockerPolicy& policy() const noexcept { return core_->prepared.policy; }

  /// Wraps `fn` so every call runs under a lock named after `name` and the
  /// arguments at positions I... (none: the function identity alone, i.e.
  /// one call at a time). Returns a LockedFunction with fn's signature (see
  /// lockon/lock_on.hpp for calls, positions, member functions, LockContext,
  /// results and errors). No I/O. Positions are checked at compile time.
  ///
  /// `name` must be non-empty and identical in every cooperating process
  /// (ConfigError otherwise). A lambda or std::function has no name of its
  /// own, so the name is always explicit; lock_on<I...>(fn) without one does
  /// not compile.
  template <std::size_t... I, class F>
  LockedFunction<std::decay_t<F>, OnBusy::throw_error, I...> lock_on(std::string_view name, F&& fn,
                                                                     LockOnOptions options = {}) const {
    return {std::forward<F>(fn), site(name, std::move(options))};
  }

  /// As lock_on, but a busy lock is an empty result instead of an exception:
  /// the call returns TryResult_t<R> (bool for void, std::optional<R>
  /// otherwise; see lock_on.hpp). The same policy applies (it still waits up
  /// to the policy's limits); pass LockOnOptions::policy with
  /// {.max_retry = 1, .retry_delay = 0ms} for a single immediate try. A lost
  /// lease still throws LockLost (fn did run; "empty" must mean it did not).
  template <std::size_t... I, class F>
  LockedFunction<std::decay_t<F>, OnBusy::return_empty, I...> try_lock_on(std::string_view name, F&& fn,
                                                                          LockOnOptions options = {}) const {
    return {std::forward<F>(fn), site(name, std::move(options))};
  }

  /// Locks EACH argument at positions I... as its own entity (the key
  /// KeyScope::entity gives for that argument alone, entity_key_for<I>),
  /// all or nothing and deadlock-free whatever the argument order, e.g.
  ///   auto transfer = locker.lock_on_each<0, 1>("bank::transfer", &bank::transfer);
  ///   transfer("acct-a", "acct-b", 10);  // excludes withdraw(acct-a), deposit(acct-b)...
  /// Returns a LockedEachFunction (lockon/lock_on.hpp); keys are taken as a
  /// lockon::MultiLock (lockon/multi_lock.hpp). options.scope is ignored.
  /// Same policy, errors and LockContext as lock_on. No I/O.
  template <std::size_t... I, class F>
  LockedEachFunction<std::decay_t<F>, OnBusy::throw_error, I...> lock_on_each(std::string_view name, F&& fn,
                                                                              LockOnOptions options = {}) const {
    return {std::forward<F>(fn), detail::EachSite(site(name, std::move(options), true))};
  }

  /// As lock_on_each, with try_lock_on's empty result when busy.
  template <std::size_t... I, class F>
  LockedEachFunction<std::decay_t<F>, OnBusy::return_empty, I...> try_lock_on_each(std::string_view name, F&& fn,
                                                                                   LockOnOptions options = {}) const {
    return {std::forward<F>(fn), detail::EachSite(site(name, std::move(options), true))};
  }

  /// Without a name: a compile error that says how to fix it.
  template <std::size_t... I, class F>
    requires(!std::is_convertible_v<F, std::string_view>)
  void lock_on(F&&) const {
    static_assert(detail::dependent_false<F>,
                  "lockon: lock_on needs the function's stable name: locker.lock_on<I...>(\"ns::function\", fn)");
  }
  template <std::size_t... I, class F>
    requires(!std::is_convertible_v<F, std::string_view>)
  void try_lock_on(F&&) const {
    static_assert(detail::dependent_false<F>,
                  "lockon: try_lock_on needs the function's stable name: locker.try_lock_on<I...>(\"ns::function\", fn)");
  }

  /// The key lock_on<I...>(name, fn) would lock for a call with `call_args`
  /// (all of the caller's arguments; I... select as in the call), with this
  /// locker's prefix and KeyScope::function. No I/O. Throws like
  /// lock_on_key.
  template <std::size_t... I, class... Args>
  std::string key_for(std::string_view name, const Args&... call_args) const {
    static_assert(((I < sizeof...(Args)) && ...), "lockon: a key_for position is out of range");
    [[maybe_unused]] const std::tuple<const Args&...> all(call_args...);
    return lock_on_key(policy().key_prefix, name, std::get<I>(all)...);
  }

  /// As key_for, for KeyScope::entity (no function identity).
  template <std::size_t... I, class... Args>
  std::string entity_key_for(const Args&... call_args) const {
    static_assert(((I < sizeof...(Args)) && ...), "lockon: an entity_key_for position is out of range");
    [[maybe_unused]] const std::tuple<const Args&...> all(call_args...);
    return entity_lock_key(policy().key_prefix, std::get<I>(all)...);
  }

  /// lockon-internal (used by decorate()).
  const std::shared_ptr<const detail::LockerCore>& core() const noexcept { return core_; }

 private:
  explicit RedisLocker(std::shared_ptr<const detail::LockerCore> core) noexcept : core_(std::move(core)) {}
  detail::OwnedSite site(std::string_view name, LockOnOptions options, bool each = false) const;

  std::shared_ptr<const detail::LockerCore> core_;
};

/// Makes `locker` the process-wide default used by decorate()d functions
/// called without an explicit locker. Thread-safe; calls already running
/// keep the locker they started with.
void set_default_locker(RedisLocker locker);

/// Forgets the default locker (the next use consults LOCKON_REDIS_URL
/// again). Thread-safe.
void reset_default_locker() noexcept;

/// The default locker: the one set by set_default_locker, else one created
/// on first use from the LOCKON_REDIS_URL environment variable (default
/// policy) and kept. Several URLs separated by whitespace mean Redlock over
/// those masters (RedisLocker::redlock), as for the `lockon` CLI. Thread-safe; cheap (a shared handle copy).
/// Throws ConfigError when neither exists, or the URL is invalid.
RedisLocker default_locker();

}  // namespace lockon
