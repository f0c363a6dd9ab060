// lockon/lock_on.hpp — running a function under a lock named after (some of)
// its arguments.
//
// `RedisLocker::lock_on<I...>(name, fn)` (lockon/locker.hpp) returns a
// `LockedFunction`: a callable with fn's call signature that, per call,
//   1. encodes the arguments at positions I... (lockon/encoding.hpp) and
//      derives the key <prefix>:<md5(name)>:lock|<md5(encoded)> (key.hpp);
//   2. acquires it under the locker's retry/deadline policy (policy.hpp);
//   3. runs fn — with a LockContext first if fn asks for one;
//   4. releases the lock (also when fn throws: the exception propagates
//      unchanged) and returns fn's result exactly: values, void, references
//      and move-only types alike;
//   5. throws LockLost instead of returning if the lease was lost while fn
//      ran (fn's result is discarded: the mutual exclusion it relied on was
//      broken, so the caller must not treat the work as safely done).
//
// WHAT CAN BE WRAPPED, AND WHAT THE POSITIONS COUNT
//
// Positions index the arguments *the caller passes* to the wrapper, from 0,
// exactly as written at the call site; an injected LockContext is not one of
// them. For a member function the caller passes the object first, so it is
// position 0 (like Python's `self`):
//
//   free function    R f(A0, A1)          locked(a0, a1)       0 = a0
//   with context     R f(LockContext&, A0) locked(a0)          0 = a0
//   member function  R C::m(A0)           locked(obj, a0)      0 = obj, 1 = a0
//   member + context R C::m(LockContext&, A0) locked(obj, a0)  1 = a0
//   lambda / functor / std::function: like a free function (operator()'s
//   parameters); they must be callable as const.
//
// The object of a member function is taken as `C&` (`const C&` for a const
// member, `C&&` for an &&-qualified one); lock on it only if it has an
// ArgEncoder. Overloaded functions must be disambiguated by a cast. Callables
// whose signature cannot be read (generic lambdas, overloaded operator())
// get a perfect-forwarding call operator instead; a LockContext is injected
// into those only if they can be called with it and not without it.
//
// Not reentrant by default: a locked function that calls itself, or another
// function locking the same key, on the same arguments waits for its own
// lock until the policy gives up (AcquireTimeout / RetriesExhausted). With
// LockOnOptions::reentrant on the nested function, a nested call on the same
// thread on a key this thread holds runs at once under the enclosing lock.
//
// lock_on_each<I...> (locker.hpp) locks each selected argument as its own
// entity, all keys or none, deadlock-free in any argument order
// (LockedEachFunction at the end of this file, lockon/multi_lock.hpp).
//
// Arguments are encoded by const reference before the call and then
// forwarded to fn: nothing is copied, move-only arguments are moved through.
// With a readable signature the wrapper's parameters are fn's, so by-value
// parameters cost one extra move.
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockon/encoding.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"
#include "lockon/lock.hpp"
#include "lockon/lock_context.hpp"
#include "lockon/policy.hpp"
#include "lockon/signature.hpp"

namespace lockon {

/// What a locked call does when the lock stays busy.
enum class OnBusy {
  throw_error,   // AcquireTimeout / RetriesExhausted (lock_on)
  return_empty,  // an empty result (try_lock_on): see TryResult
};

/// The result of a try_lock_on call for a function returning R: an empty
/// value means "the lock stayed busy; the function did not run".
///   void -> bool (true: it ran),  T -> std::optional<T>,
///   T& -> std::optional<std::reference_wrapper<T>>,  T&& -> std::optional<T>.
template <class R>
struct TryResult {
  using type = std::optional<R>;
};
template <>
struct TryResult<void> {
  using type = bool;
};
template <class T>
struct TryResult<T&> {
  using type = std::optional<std::reference_wrapper<T>>;
};
template <class T>
struct TryResult<T&&> {
  using type = std::optional<std::remove_cv_t<T>>;
};
template <class R>
using TryResult_t = typename TryResult<R>::type;

/// The key lock_on uses for function `name` when the selected arguments
/// (already picked, in position order) are `selected...`:
///   <prefix>:<md5hex(name)>:lock|<md5hex(encode_args(selected...))>
/// The `lockon key` command computes the same string. Throws ConfigError for
/// an empty prefix or name, or an argument encode_args rejects.
template <class... Selected>
std::string lock_on_key(std::string_view prefix, std::string_view name, const Selected&... selected) {
  return make_lock_key(prefix, function_digest(name), encode_args(selected...));
}

/// The KeyScope::entity key: <prefix>:entity:lock|<md5hex(encode_args(selected...))>.
template <class... Selected>
std::string entity_lock_key(std::string_view prefix, const Selected&... selected) {
  return make_lock_key(prefix, std::string_view{}, encode_args(selected...));
}

namespace detail {

template <class R, OnBusy Mode>
using CallResult = std::conditional_t<Mode == OnBusy::throw_error, R, TryResult_t<R>>;

/// Unlocks on scope exit unless done early (the exception path).
class UnlockOnExit {
 public:
  explicit UnlockOnExit(DistributedLock& lock) noexcept : lock_(&lock) {}
  ~UnlockOnExit() { now(); }
  UnlockOnExit(const UnlockOnExit&) = delete;
  UnlockOnExit& operator=(const UnlockOnExit&) = delete;
  void now() noexcept {
    if (lock_ != nullptr) lock_->unlock();
    lock_ = nullptr;
  }

 private:
  DistributedLock* lock_;
};

/// Files the lock as idle when the call is over, whatever the outcome.
class RecycleOnExit {
 public:
  RecycleOnExit(const CallSite& site, Acquisition& acquired) noexcept : site_(site), acquired_(acquired) {}
  ~RecycleOnExit() { recycle(site_, std::move(acquired_)); }
  RecycleOnExit(const RecycleOnExit&) = delete;
  RecycleOnExit& operator=(const RecycleOnExit&) = delete;

 private:
  const CallSite& site_;
  Acquisition& acquired_;
};

/// Runs `body(context)` under the acquisition (or, reentered, under the
/// enclosing call's lock), releases, reports a lost lease. See the top of
/// this file for the contract.
// Runs `body(context)`, then `release()` (after a normal return only: an
// exception leaves the release to its scope guard), then reports a lost
// lease; returns what the call returns in `Mode`.
/// A lazy task: a coroutine type (a promise_type, directly or through
/// std::coroutine_traits, as asio::awaitable has) or anything awaitable.
/// Returned by a wrapped callable, its body would run after the lock is
/// released (review, session 21).
template <class R>
concept LazyTask = requires { typename R::promise_type; } ||
                   requires { typename std::coroutine_traits<R>::promise_type; } ||
                   requires(R& r) { r.await_ready(); } || requires(R&& r) { std::forward<R>(r).operator co_await(); };

template <class R, OnBusy Mode, class Body, class Release>
CallResult<R, Mode> run_body(LockContext& context, Body&& body, Release&& release) {
  static_assert(!LazyTask<std::remove_cvref_t<R>>,
                "lock_on: the callable returns a coroutine or an awaitable; its body would run after the lock "
                "is released. Use lockon::AsyncLocker::async_lock_on (lockon/async.hpp) for coroutines.");
  if constexpr (std::is_void_v<R>) {
    std::forward<Body>(body)(context);
    release();
    context.throw_if_lost();
    if constexpr (Mode == OnBusy::return_empty) return true;
  } else {
    decltype(auto) result = std::forward<Body>(body)(context);
    release();
    context.throw_if_lost();
    if constexpr (Mode == OnBusy::throw_error) {
      if constexpr (std::is_reference_v<R>) {
        return static_cast<R>(result);
      } else {
        return result;  // implicitly moved
      }
    } else if constexpr (std::is_lvalue_reference_v<R>) {
      return CallResult<R, Mode>(std::ref(result));
    } else {
      return CallResult<R, Mode>(std::move(result));
    }
  }
}

template <class R, OnBusy Mode, class Body>
CallResult<R, Mode> run_acquired(const CallSite& site, Acquisition acquired, Body&& body) {
  if (acquired.reentered != nullptr) {
    // Nested reentrant call: the enclosing call acquired and will release.
    LockContext context = ContextAccess::make(*acquired.reentered, site.function_name, 0);
    return run_body<R, Mode>(context, std::forward<Body>(body), [] {});
  }
  if constexpr (Mode == OnBusy::return_empty) {
    if (!acquired.lock) return CallResult<R, Mode>{};
  }
  // Destroyed in reverse order: unlock, then the context, the thread's
  // record, then recycling.
  const RecycleOnExit recycle_lock(site, acquired);
  const HeldByThread held_here(site.core, acquired.lock.get());
  LockContext context = ContextAccess::make(*acquired.lock, site.function_name, acquired.attempts);
  UnlockOnExit unlock(*acquired.lock);
  return run_body<R, Mode>(context, std::forward<Body>(body), [&unlock] { unlock.now(); });
}

/// Acquire, run `body(context)`, release, report a lost lease. See the top of
/// this file for the contract. `encoded_args`: encode_args of the selected
/// arguments (the key is derived from it, or found with an idle lock).
template <class R, OnBusy Mode, class Body>
CallResult<R, Mode> run_locked(const CallSite& site, std::string encoded_args, Body&& body) {
  return run_acquired<R, Mode>(site, acquire(site, std::move(encoded_args), Mode == OnBusy::throw_error),
                               std::forward<Body>(body));
}

/// lock_on_each: one encoded argument per key, all keys or none.
template <class R, OnBusy Mode, class Body>
CallResult<R, Mode> run_locked_each(const CallSite& site, const std::vector<std::string>& encoded_args,
                                    Body&& body) {
  return run_acquired<R, Mode>(site, acquire_each(site, encoded_args, Mode == OnBusy::throw_error),
                               std::forward<Body>(body));
}

/// True for a Site whose calls lock each selected argument separately.
template <class Site>
inline constexpr bool locks_each = requires { requires Site::each; };

template <std::size_t N, class... T>
using NthType = std::tuple_element_t<N, std::tuple<T...>>;

/// State and per-call logic shared by LockedFunction and decorate()'s
/// result. `Site` supplies the locker and key digest of a call:
///   template <class Use> decltype(auto) visit(Use&& use) const;  // use(const CallSite&)
template <class F, class Site, std::size_t... I>
class LockedCallBase {
 public:
  /// The wrapped callable.
  const F& function() const noexcept { return fn_; }

 protected:
  constexpr LockedCallBase(F fn, Site site) : fn_(std::move(fn)), site_(std::move(site)) {}

  // encode_args of the arguments at positions I...
  template <class... A>
  static std::string encode_selected(const A&... args) {
    static_assert(((I < sizeof...(A)) && ...), "lockon: a lock_on argument position is out of range");
    [[maybe_unused]] const std::tuple<const A&...> all(args...);
    return encode_args(std::get<I>(all)...);
  }
  template <class... A>
  static void encode_selected_into(std::string& out, const A&... args) {
    static_assert(((I < sizeof...(A)) && ...), "lockon: a lock_on argument position is out of range");
    [[maybe_unused]] const std::tuple<const A&...> all(args...);
    encode_args_into(out, std::get<I>(all)...);
  }

  // lock_on_each: encode_args of each argument at positions I..., alone.
  template <class... A>
  static std::vector<std::string> encode_each(const A&... args) {
    static_assert(((I < sizeof...(A)) && ...), "lockon: a lock_on_each argument position is out of range");
    [[maybe_unused]] const std::tuple<const A&...> all(args...);
    return std::vector<std::string>{encode_args(std::get<I>(all))...};
  }

  // The key (lock_on) or the keys, one per position (lock_on_each).
  template <class... A>
  auto key(const A&... args) const {
    return site_.visit([&](const CallSite& site) {
      if constexpr (locks_each<Site>) {
        std::vector<std::string> keys;
        for (const std::string& encoded : encode_each(args...))
          keys.push_back(make_lock_key(site.policy.policy.key_prefix, std::string_view{}, encoded));
        return keys;
      } else {
        return make_lock_key(site.policy.policy.key_prefix, site.digest, encode_selected(args...));
      }
    });
  }

  template <class R, OnBusy Mode, Inject How, class... A>
  CallResult<R, Mode> call(A&&... args) const {
    return site_.visit([&](const CallSite& site) -> CallResult<R, Mode> {
      if constexpr (locks_each<Site>) {
        const std::vector<std::string> encoded = encode_each(args...);  // before anything is moved into fn
        return run_locked_each<R, Mode>(site, encoded, [&](LockContext& context) -> R {
          return invoke_with<How>(fn_, context, std::forward<A>(args)...);
        });
      }
      std::string encoded = take_encoding_buffer();
      encode_selected_into(encoded, args...);  // before anything is moved into fn
      return run_locked<R, Mode>(site, std::move(encoded), [&](LockContext& context) -> R {
        return invoke_with<How>(fn_, context, std::forward<A>(args)...);
      });
    });
  }

  F fn_;
  Site site_;
};

/// Adds the call operator and key_for() with fn's signature.
template <class F, class Site, OnBusy Mode, class Positions, class Sig>
class LockedCall;

template <class F, class Site, OnBusy Mode, std::size_t... I, class R, class... Args>
class LockedCall<F, Site, Mode, std::index_sequence<I...>, Signature<R, Args...>>
    : public LockedCallBase<F, Site, I...> {
  static_assert(((I < sizeof...(Args)) && ...),
                "lockon: a lock_on argument position is not less than the number of arguments the caller passes "
                "(an injected LockContext is not counted; a member function's object is position 0)");
  // An unencodable argument fails inside lock_argument_is_encodable<Position,
  // Arg> with that type's own reason (char, pointer, unordered container...).
  static_assert((detail::lock_argument_is_encodable<I, NthType<(I < sizeof...(Args) ? I : 0), Args..., int>>() &&
                 ...),
                "lockon: the argument at a lock_on position cannot be encoded (reason above)");
  static_assert(CallableTraits<F>::const_callable,
                "lockon: the callable must be invocable as const (mutable lambdas are not supported: a locked "
                "function may be called from several threads)");

 protected:
  using LockedCallBase<F, Site, I...>::LockedCallBase;

 public:
  /// fn's result type.
  using result_type = R;

  /// Runs fn under the lock (see the top of this file). Blocks while
  /// acquiring (bounded by the policy) and while fn runs.
  /// Throws: AcquireTimeout / RetriesExhausted when busy (lock_on only;
  /// try_lock_on returns empty), LockLost after fn returned if the lease was
  /// lost, whatever fn threw (unchanged), IoError/ReplyError/QuorumError on
  /// infrastructure failure, ConfigError if an argument cannot be encoded.
  CallResult<R, Mode> operator()(Args... args) const {
    return this->template call<R, Mode, CallableTraits<F>::inject>(std::forward<Args>(args)...);
  }

  /// The key a call with these arguments would lock (same prefix, scope and
  /// positions); for lock_on_each a std::vector of keys, one per position
  /// in position order. No I/O; throws like lock_on_key.
  auto key_for(const std::remove_reference_t<Args>&... args) const { return this->key(args...); }
};

template <class F, class Site, OnBusy Mode, std::size_t... I>
class LockedCall<F, Site, Mode, std::index_sequence<I...>, UnknownSignature> : public LockedCallBase<F, Site, I...> {
 protected:
  using LockedCallBase<F, Site, I...>::LockedCallBase;

 public:
  /// As for a readable signature; the arguments are forwarded as passed.
  template <class... A>
    requires std::is_invocable_v<const F&, A...> || std::is_invocable_v<const F&, LockContext&, A...>
  auto operator()(A&&... args) const
      -> CallResult<typename GenericResult<F, generic_inject<F, A...>, A...>::type, Mode> {
    constexpr Inject how = generic_inject<F, A...>;
    using R = typename GenericResult<F, how, A...>::type;
    return this->template call<R, Mode, how>(std::forward<A>(args)...);
  }

  template <class... A>
  auto key_for(const A&... args) const {
    return this->key(args...);
  }
};

/// The Site of a RedisLocker-made LockedFunction: owns what it refers to.
class OwnedSite {
 public:
  OwnedSite(std::shared_ptr<const LockerCore> core, std::shared_ptr<const PreparedPolicy> policy, std::string name,
            std::string digest, bool reentrant = false, bool own_policy = false)
      : core_(std::move(core)),
        policy_(std::move(policy)),
        name_(std::move(name)),
        digest_(std::move(digest)),
        reentrant_(reentrant),
        own_policy_(own_policy) {}

  template <class Use>
  decltype(auto) visit(Use&& use) const {
    const CallSite site{*core_, *policy_, name_, digest_, reentrant_, own_policy_};
    return std::forward<Use>(use)(site);
  }

  const std::string& name() const noexcept { return name_; }
  KeyScope scope() const noexcept { return digest_.empty() ? KeyScope::entity : KeyScope::function; }
  const LockerPolicy& policy() const noexcept { return policy_->policy; }

 private:
  std::shared_ptr<const LockerCore> core_;
  std::shared_ptr<const PreparedPolicy> policy_;
  std::string name_;
  std::string digest_;
  bool reentrant_ = false;
  bool own_policy_ = false;
};

/// The Site of lock_on_each: each selected argument is its own entity key.
class EachSite : public OwnedSite {
 public:
  static constexpr bool each = true;
  explicit EachSite(OwnedSite site) : OwnedSite(std::move(site)) {}
};

}  // namespace detail

/// The callable returned by RedisLocker::lock_on<I...> (Mode throw_error) and
/// try_lock_on<I...> (Mode return_empty). Its call operator has fn's
/// parameters (minus an injected LockContext) and returns R, or
/// TryResult_t<R> for try_lock_on. Copyable (copies share the locker);
/// thread-safe: call it from any number of threads concurrently.
template <class F, OnBusy Mode, std::size_t... I>
class LockedFunction
    : public detail::LockedCall<F, detail::OwnedSite, Mode, std::index_sequence<I...>,
                                typename detail::CallableTraits<F>::signature> {
  using Base = detail::LockedCall<F, detail::OwnedSite, Mode, std::index_sequence<I...>,
                                  typename detail::CallableTraits<F>::signature>;

 public:
  /// Prefer RedisLocker::lock_on, which validates and computes the digest.
  LockedFunction(F fn, detail::OwnedSite site) : Base(std::move(fn), std::move(site)) {}

  /// The function identity given to lock_on.
  const std::string& name() const noexcept { return this->site_.name(); }
  KeyScope scope() const noexcept { return this->site_.scope(); }
  /// The policy in effect (the locker's, or LockOnOptions::policy).
  const LockerPolicy& policy() const noexcept { return this->site_.policy(); }
};

}  // namespace lockon

namespace lockon {

/// The callable returned by RedisLocker::lock_on_each<I...> (Mode
/// throw_error) and try_lock_on_each<I...> (Mode return_empty): as
/// LockedFunction, but each argument at positions I... is locked as its own
/// entity — key entity_lock_key(prefix, argument) — and all those keys are
/// taken together as one lockon::MultiLock (lockon/multi_lock.hpp): all or
/// none, in sorted key order, so transfer(a, b) and transfer(b, a) never
/// deadlock. The same policy, deadline, retries and LockContext apply; the
/// context's lock() is the MultiLock, key() the keys joined by ',', and
/// fence(i) the fence of the i-th position's key (LockerPolicy::fencing).
/// Equal arguments lock one key. Key objects are not reused between calls.
template <class F, OnBusy Mode, std::size_t... I>
class LockedEachFunction
    : public detail::LockedCall<F, detail::EachSite, Mode, std::index_sequence<I...>,
                                typename detail::CallableTraits<F>::signature> {
  using Base = detail::LockedCall<F, detail::EachSite, Mode, std::index_sequence<I...>,
                                  typename detail::CallableTraits<F>::signature>;
  static_assert(sizeof...(I) >= 1, "lockon: lock_on_each needs at least one argument position");

 public:
  LockedEachFunction(F fn, detail::EachSite site) : Base(std::move(fn), std::move(site)) {}

  /// The name given to lock_on_each (messages and metrics only: the keys
  /// do not contain it).
  const std::string& name() const noexcept { return this->site_.name(); }
  const LockerPolicy& policy() const noexcept { return this->site_.policy(); }
};

}  // namespace lockon
