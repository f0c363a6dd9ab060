// lockon/decorate.hpp — locked functions declared at namespace scope, with
// their name and argument positions fixed at compile time.
//
//   int withdraw(const std::string& card, int amount);
//
//   // The function identity's MD5 is computed by the compiler (constexpr
//   // MD5, lockon/md5.hpp); the positions and their encodability are checked
//   // by it too. An empty name does not compile.
//   inline constexpr auto locked_withdraw = lockon::decorate<"bank::withdraw", 0>(&withdraw);
//
//   int main() {
//     lockon::set_default_locker(lockon::RedisLocker("redis://127.0.0.1:6379"));
//     locked_withdraw("card-1", 100);                  // the default locker
//     locked_withdraw.with(other_locker)("card-1", 5);  // an explicit one
//   }
//
// The result has the call operator and key_for() of a LockedFunction (same
// signature rules, positions, LockContext injection, results and errors:
// lockon/lock_on.hpp). Calls without an explicit locker — and key_for(),
// which needs the locker's key prefix — use default_locker()
// (lockon/locker.hpp): the one set by set_default_locker, or one made from
// LOCKON_REDIS_URL; with neither, they throw ConfigError saying so. The
// default locker is looked up per call (a mutex and a shared-handle copy).
//
// `inline constexpr` needs a literal callable (a function pointer, a
// captureless lambda); a std::function works with `inline const`.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lockon/key.hpp"
#include "lockon/lock_on.hpp"
#include "lockon/locker.hpp"

namespace lockon {

/// A string usable as a template argument: decorate<"bank::withdraw">.
template <std::size_t N>
struct FixedString {
  char chars[N]{};

  constexpr FixedString(const char (&text)[N]) noexcept {  // NOLINT: implicit by design
    std::copy_n(text, N, chars);
  }
  /// Without the literal's terminating NUL.
  constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
};

namespace detail {

/// The Site of a decorated function: the digest is a compile-time constant,
/// the locker is the default one, looked up per call.
template <FixedString Name>
class DecoratedSite {
 public:
  static constexpr std::array<char, 32> digest = function_digest_ct(Name.view());

  constexpr explicit DecoratedSite(KeyScope scope) noexcept : scope_(scope) {}

  template <class Use>
  decltype(auto) visit(Use&& use) const {
    const RedisLocker locker = default_locker();  // keeps the locker alive for the call
    const CallSite site{*locker.core(), locker.core()->prepared, Name.view(), digest_view()};
    return std::forward<Use>(use)(site);
  }

  constexpr KeyScope scope() const noexcept { return scope_; }
  constexpr std::string_view digest_view() const noexcept {
    return scope_ == KeyScope::entity ? std::string_view{} : std::string_view(digest.data(), digest.size());
  }

 private:
  KeyScope scope_;
};

}  // namespace detail

/// A function locked on its arguments at positions I..., named `Name`.
/// Made by decorate(); usually an `inline constexpr` namespace-scope object.
/// Thread-safe; copyable.
template <FixedString Name, class F, std::size_t... I>
class Decorated : public detail::LockedCall<F, detail::DecoratedSite<Name>, OnBusy::throw_error,
                                            std::index_sequence<I...>, typename detail::CallableTraits<F>::signature> {
  using Base = detail::LockedCall<F, detail::DecoratedSite<Name>, OnBusy::throw_error, std::index_sequence<I...>,
                                  typename detail::CallableTraits<F>::signature>;

 public:
  /// The function identity, and md5hex of it computed at compile time.
  static constexpr std::string_view name = Name.view();
  static constexpr std::array<char, 32> identity_digest = detail::DecoratedSite<Name>::digest;

  constexpr Decorated(F fn, KeyScope scope) : Base(std::move(fn), detail::DecoratedSite<Name>(scope)) {}

  constexpr KeyScope scope() const noexcept { return this->site_.scope(); }

  /// The same function on an explicit locker (its backend and policy).
  /// Returns a LockedFunction; no I/O. Cheap, but hoist it out of hot loops
  /// (it copies the name and digest).
  LockedFunction<F, OnBusy::throw_error, I...> with(const RedisLocker& locker) const {
    return {this->fn_, site_for(locker)};
  }

  /// As with(), but busy is an empty result (see RedisLocker::try_lock_on).
  LockedFunction<F, OnBusy::return_empty, I...> try_with(const RedisLocker& locker) const {
    return {this->fn_, site_for(locker)};
  }
  /// try_with(default_locker()). Throws ConfigError if there is none.
  LockedFunction<F, OnBusy::return_empty, I...> try_with() const { return try_with(default_locker()); }

 private:
  detail::OwnedSite site_for(const RedisLocker& locker) const {
    return detail::OwnedSite(locker.core(), std::shared_ptr<const detail::PreparedPolicy>(locker.core(), &locker.core()->prepared),
                             std::string(name), std::string(this->site_.digest_view()));
  }
};

/// Declares a locked function at compile time: `Name` is its identity (non-
/// empty, else a compile error), I... the positions of the arguments to lock
/// on (checked at compile time), `scope` whether the identity is part of the
/// key (KeyScope::entity shares the lock with every function locking the
/// same values). constexpr when F is a literal type.
template <FixedString Name, std::size_t... I, class F>
constexpr Decorated<Name, std::decay_t<F>, I...> decorate(F&& fn, KeyScope scope = KeyScope::function) {
  static_assert(Name.view().size() > 0, "lockon: decorate needs a non-empty function name");
  return Decorated<Name, std::decay_t<F>, I...>(std::forward<F>(fn), scope);
}

}  // namespace lockon
