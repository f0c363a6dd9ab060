// lockon/async_locker.hpp — lock_on for coroutines (included by
// lockon/async.hpp; include that).
//
//   lockon::AsyncLocker locker(client, {.max_retry = 3, .retry_delay = 2s, .timeout = 10s});
//   auto withdraw = locker.async_lock_on<0>("bank::withdraw",
//       [&](std::string card, int amount) -> asio::awaitable<int> { ... co_return balance; });
//   int balance = co_await withdraw("card-1", 100);
//
// The same keys as RedisLocker::lock_on (lock_on_key / entity_lock_key with
// the policy's prefix): a synchronous lock_on and an async_lock_on of the
// same name and arguments exclude each other. The same policy fields and
// errors: AcquireTimeout when `timeout` passes, RetriesExhausted after
// `max_retry` windows of `retry_delay`, LockLost (after fn returned, its
// result discarded) when the lease was lost while fn ran; fn's own
// exceptions propagate unchanged after the release.
//
// RedisLocker itself cannot carry this member without putting Asio into
// locker.hpp (the synchronous headers must not need Asio), hence AsyncLocker.
//
// Differences from the synchronous locker: the retry windows of one call are
// waited as one wait on one FIFO place (the synchronous locker keeps its
// place across windows too; jitter is not applied, it only matters for
// polling backends); attempts() reports how many windows had begun when
// the lock was acquired. on_attempt is called once per call, with the
// outcome. LockOnOptions::reentrant is refused (ConfigError). Calls are
// counted in lockon/metrics.hpp's registry (all but hand-overs and renewal
// failures). Arguments are copied (decayed) into the coroutine frame, since
// the call outlives the caller's full expression.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "lockon/lock_on.hpp"
#include "lockon/policy.hpp"

namespace lockon {

/// What a function running under async_lock_on can know about its lock;
/// inject it by taking `lockon::AsyncLockContext&` as the first parameter.
class AsyncLockContext {
 public:
  AsyncLockContext(AsyncLock& lock, std::string_view function_name, int attempts) noexcept
      : lock_(lock), function_name_(function_name), attempts_(attempts) {}
  AsyncLockContext(const AsyncLockContext&) = delete;
  AsyncLockContext& operator=(const AsyncLockContext&) = delete;

  const std::string& key() const noexcept { return lock_.name(); }
  std::string_view function_name() const noexcept { return function_name_; }
  std::uint64_t fence() const noexcept { return lock_.fence(); }
  bool lost() const noexcept { return lock_.lost(); }
  std::stop_token stop_token() const noexcept { return lock_.lost_token(); }
  int attempts() const noexcept { return attempts_; }
  /// E.g. to async_extend() by hand; do not unlock it.
  AsyncLock& lock() const noexcept { return lock_; }
  /// Throws LockLost if the lease was lost (async_lock_on calls it after fn).
  void throw_if_lost() const {
    if (!lock_.lost()) return;
    throw LockLost("async_lock_on '" + std::string(function_name_) + "': the lease on lock '" + lock_.name() +
                       "' was lost while the function ran, so its mutual exclusion was not guaranteed; the result "
                       "was discarded",
                   lock_.name());
  }

 private:
  AsyncLock& lock_;
  std::string_view function_name_;
  int attempts_;
};

namespace detail {

struct AsyncLockerCore {
  AsyncClient client;
  PreparedPolicy prepared;
};

/// Acquires `lock` under the policy; returns the attempt count. Throws
/// AcquireTimeout / RetriesExhausted.
asio::awaitable<int> async_acquire_for_call(const AsyncLockerCore& core, AsyncLock& lock,
                                            std::string_view function_name);
/// Records a call that held the lock since `acquired_at` (lockon/metrics.hpp).
void record_async_release(std::string_view function_name, std::chrono::steady_clock::time_point acquired_at,
                          bool lost) noexcept;

/// Records the release of a call that acquired its lock however the call
/// ends: returned, threw, or its frame destroyed (a cancelled caller), so
/// the held gauge never keeps a call that is gone.
struct AsyncReleaseRecord {
  std::string_view function_name;
  const AsyncLock& lock;
  std::chrono::steady_clock::time_point acquired_at = std::chrono::steady_clock::now();
  ~AsyncReleaseRecord() { record_async_release(function_name, acquired_at, lock.lost()); }
};

template <class T>
struct AwaitableValue;
template <class T, class E>
struct AwaitableValue<asio::awaitable<T, E>> {
  using type = T;
};

}  // namespace detail

/// The callable returned by AsyncLocker::async_lock_on<I...>: call it with
/// fn's arguments (minus an injected AsyncLockContext&) and co_await the
/// asio::awaitable<R> it returns. Copyable; copies share the locker.
template <class F, std::size_t... I>
class AsyncLockedFunction {
 public:
  AsyncLockedFunction(std::shared_ptr<const detail::AsyncLockerCore> core, std::string name, std::string digest,
                      F fn)
      : core_(std::move(core)), name_(std::move(name)), digest_(std::move(digest)), fn_(std::move(fn)) {}

  template <class... A>
  auto operator()(A&&... args) const {
    constexpr bool inject = std::is_invocable_v<const F&, AsyncLockContext&, std::decay_t<A>...>;
    static_assert(inject || std::is_invocable_v<const F&, std::decay_t<A>...>,
                  "lockon: async_lock_on's function cannot be called with these arguments");
    using Result = std::conditional_t<inject, std::invoke_result<const F&, AsyncLockContext&, std::decay_t<A>...>,
                                      std::invoke_result<const F&, std::decay_t<A>...>>;
    using R = typename detail::AwaitableValue<typename Result::type>::type;
    std::string key = key_for(args...);
    return run<R, inject>(core_, name_, std::move(key), fn_, std::decay_t<A>(std::forward<A>(args))...);
  }

  /// The key a call with these arguments locks (as RedisLocker::key_for).
  template <class... A>
  std::string key_for(const A&... args) const {
    static_assert(((I < sizeof...(A)) && ...), "lockon: an async_lock_on position is out of range");
    [[maybe_unused]] const std::tuple<const A&...> all(args...);
    return make_lock_key(core_->prepared.policy.key_prefix, digest_, encode_args(std::get<I>(all)...));
  }

  const std::string& name() const noexcept { return name_; }

 private:
  template <class R, bool Inject, class... V>
  static asio::awaitable<R> run(std::shared_ptr<const detail::AsyncLockerCore> core, std::string name,
                                std::string key, F fn, V... args) {
    AsyncLock lock(core->client, std::move(key), core->prepared.lock_options);
    const int attempts = co_await detail::async_acquire_for_call(*core, lock, name);
    const detail::AsyncReleaseRecord release_record{name, lock};
    AsyncLockContext context(lock, name, attempts);
    std::exception_ptr failure;
    std::optional<std::conditional_t<std::is_void_v<R>, int, R>> result;
    try {
      if constexpr (std::is_void_v<R>) {
        if constexpr (Inject) co_await std::invoke(fn, context, std::move(args)...);
        else co_await std::invoke(fn, std::move(args)...);
        result.emplace(0);
      } else {
        if constexpr (Inject) result.emplace(co_await std::invoke(fn, context, std::move(args)...));
        else result.emplace(co_await std::invoke(fn, std::move(args)...));
      }
    } catch (...) {
      failure = std::current_exception();
    }
    // Released before the caller sees anything. (If the calling coroutine
    // was cancelled, this co_await throws and ~AsyncLock releases instead.)
    co_await lock.async_unlock(asio::use_awaitable);
    if (failure) std::rethrow_exception(failure);
    context.throw_if_lost();
    if constexpr (!std::is_void_v<R>) co_return std::move(*result);
  }

  std::shared_ptr<const detail::AsyncLockerCore> core_;
  std::string name_;
  std::string digest_;  // function_digest(name), or empty for KeyScope::entity
  F fn_;
};

/// lock_on for coroutine functions (see the top of this file).
class AsyncLocker {
 public:
  /// Throws ConfigError for a bad policy (as RedisLocker).
  explicit AsyncLocker(AsyncClient client, LockerPolicy policy = {});

  /// Wraps `fn` (a callable returning asio::awaitable<R>) so that each call
  /// runs under the lock named after `name` and the arguments at I...
  /// `name` must be non-empty (ConfigError). `options.reentrant` is refused
  /// (ConfigError): reentrancy is tracked per thread, and coroutines of one
  /// thread are not one owner — a nested call on a key its caller holds
  /// waits for it (until the policy's timeout).
  template <std::size_t... I, class F>
  AsyncLockedFunction<std::decay_t<F>, I...> async_lock_on(std::string_view name, F&& fn,
                                                           LockOnOptions options = {}) const {
    auto core = options.policy ? with_policy(*options.policy) : core_;
    return {std::move(core), std::string(name), digest_for(name, options), std::forward<F>(fn)};
  }

  const LockerPolicy& policy() const noexcept { return core_->prepared.policy; }

 private:
  std::shared_ptr<const detail::AsyncLockerCore> with_policy(LockerPolicy policy) const;
  static std::string digest_for(std::string_view name, const LockOnOptions& options);
  std::shared_ptr<const detail::AsyncLockerCore> core_;
};

}  // namespace lockon
