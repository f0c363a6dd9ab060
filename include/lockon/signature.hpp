// lockon/signature.hpp — lockon-internal: reading a callable's signature for
// lock_on (which call operator the wrapper exposes, where a LockContext is
// injected) and invoking it. Included by lockon/lock_on.hpp; not an API.
//
// Supported: function pointers (and references), pointers to member
// functions (any const / & / && qualification, noexcept or not), and class
// types with one non-template operator() (lambdas, functors,
// std::function). Anything else — generic lambdas, overloaded operator() —
// has an UnknownSignature: the wrapper then forwards whatever it is called
// with, and injects a context only into callables that need one.
#pragma once

#include <functional>
#include <type_traits>
#include <utility>

#include "lockon/lock_context.hpp"

namespace lockon::detail {

template <class... T>
struct TypeList {};

/// The call signature the wrapper exposes: fn's, minus an injected context.
template <class R, class... Args>
struct Signature {};
/// fn's signature cannot be read (generic lambda, overloaded operator()).
struct UnknownSignature {};

/// Where the LockContext goes in fn's arguments.
enum class Inject { none, first, after_object };

template <class T>
inline constexpr bool is_context_param = std::is_same_v<T, LockContext&> || std::is_same_v<T, const LockContext&>;

template <class R, class... P>
struct FirstIsContext : std::false_type {};
template <class R, class P0, class... P>
struct FirstIsContext<R, P0, P...> : std::bool_constant<is_context_param<P0>> {};

// Signature<R, Head..., P...> with P's first element dropped when Drop.
template <bool Drop, class R, class Head, class... P>
struct MakeSignature;
template <class R, class... Head, class... P>
struct MakeSignature<false, R, TypeList<Head...>, P...> {
  using type = Signature<R, Head..., P...>;
};
template <class R, class... Head, class P0, class... P>
struct MakeSignature<true, R, TypeList<Head...>, P0, P...> {
  using type = Signature<R, Head..., P...>;
};

// Reads plain and "abominable" function types (those of member functions).
enum class RefQual { none, lvalue, rvalue };
template <class T>
struct FunctionType;
template <class R, class... P, bool N>
struct FunctionType<R(P...) noexcept(N)> {
  using result = R;
  using params = TypeList<P...>;
  static constexpr bool is_const = false;
  static constexpr RefQual ref = RefQual::none;
};
template <class R, class... P, bool N>
struct FunctionType<R(P...) const noexcept(N)> : FunctionType<R(P...)> {
  static constexpr bool is_const = true;
};
template <class R, class... P, bool N>
struct FunctionType<R(P...) & noexcept(N)> : FunctionType<R(P...)> {
  static constexpr RefQual ref = RefQual::lvalue;
};
template <class R, class... P, bool N>
struct FunctionType<R(P...) const & noexcept(N)> : FunctionType<R(P...)> {
  static constexpr bool is_const = true;
  static constexpr RefQual ref = RefQual::lvalue;
};
template <class R, class... P, bool N>
struct FunctionType<R(P...) && noexcept(N)> : FunctionType<R(P...)> {
  static constexpr RefQual ref = RefQual::rvalue;
};
template <class R, class... P, bool N>
struct FunctionType<R(P...) const && noexcept(N)> : FunctionType<R(P...)> {
  static constexpr bool is_const = true;
  static constexpr RefQual ref = RefQual::rvalue;
};

template <class R, class Head, class Params>
struct Analyzed;
template <class R, class Head, class... P>
struct Analyzed<R, Head, TypeList<P...>> {
  static constexpr bool wants_context = FirstIsContext<R, P...>::value;
  using signature = typename MakeSignature<wants_context, R, Head, P...>::type;
};

/// CallableTraits<F>: `signature` and `inject` for a decayed callable F.
template <class F>
struct CallableTraits {
  using signature = UnknownSignature;
  static constexpr Inject inject = Inject::none;  // decided per call
  static constexpr bool const_callable = true;     // checked per call
};

template <class Fn>
  requires std::is_function_v<Fn>
struct CallableTraits<Fn*> {
  using T = FunctionType<Fn>;
  using A = Analyzed<typename T::result, TypeList<>, typename T::params>;
  using signature = typename A::signature;
  static constexpr Inject inject = A::wants_context ? Inject::first : Inject::none;
  static constexpr bool const_callable = true;
};

template <class Fn, class C>
  requires std::is_function_v<Fn>
struct CallableTraits<Fn C::*> {
  using T = FunctionType<Fn>;
  using Object = std::conditional_t<T::is_const, const C, C>;
  using ObjectParam = std::conditional_t<T::ref == RefQual::rvalue, Object&&, Object&>;
  using A = Analyzed<typename T::result, TypeList<ObjectParam>, typename T::params>;
  using signature = typename A::signature;
  static constexpr Inject inject = A::wants_context ? Inject::after_object : Inject::none;
  static constexpr bool const_callable = true;
};

template <class F>
  requires std::is_class_v<F> && requires { &F::operator(); }
struct CallableTraits<F> {
  using T = typename CallableTraits<decltype(&F::operator())>::T;  // operator()'s own type
  using A = Analyzed<typename T::result, TypeList<>, typename T::params>;
  using signature = typename A::signature;
  static constexpr Inject inject = A::wants_context ? Inject::first : Inject::none;
  static constexpr bool const_callable = T::is_const && T::ref != RefQual::rvalue;
};

// For callables without a readable signature: inject the context only when
// fn needs it (callable with it, not without it).
template <class M>
struct MemberClassOf;
template <class Fn, class C>
struct MemberClassOf<Fn C::*> {
  using type = C;
};
template <class M>
using MemberClass = typename MemberClassOf<M>::type;

template <class F, class... A>
inline constexpr Inject generic_inject =
    std::is_invocable_v<const F&, LockContext&, A...> && !std::is_invocable_v<const F&, A...> ? Inject::first
                                                                                               : Inject::none;

template <class F, Inject How, class... A>
struct GenericResult {
  using type = std::invoke_result_t<const F&, A...>;
};
template <class F, class... A>
struct GenericResult<F, Inject::first, A...> {
  using type = std::invoke_result_t<const F&, LockContext&, A...>;
};

// Member function pointers are called with .* here rather than through
// std::invoke: GCC 12 at -O2 cannot always prove a stored member pointer
// non-virtual and then warns (-Warray-bounds) that the vtable load could
// read past a small object. The warning is a false positive (a non-virtual
// pointer never loads the vtable); it is silenced here, where the call is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
template <class Fn, class O, class... A>
decltype(auto) invoke_member(Fn fn, O&& object, A&&... args) {
  if constexpr (std::is_pointer_v<std::remove_cvref_t<O>>) {
    return ((*object).*fn)(std::forward<A>(args)...);
  } else if constexpr (std::is_base_of_v<MemberClass<Fn>, std::remove_cvref_t<O>>) {
    return (std::forward<O>(object).*fn)(std::forward<A>(args)...);
  } else {
    return std::invoke(fn, std::forward<O>(object), std::forward<A>(args)...);  // reference_wrapper...
  }
}

template <class Fn, class O, class... A>
decltype(auto) invoke_after_object(Fn fn, LockContext& context, O&& object, A&&... args) {
  return invoke_member(fn, std::forward<O>(object), context, std::forward<A>(args)...);
}

template <Inject How, class Fn, class... A>
decltype(auto) invoke_with(const Fn& fn, LockContext& context, A&&... args) {
  if constexpr (std::is_member_function_pointer_v<Fn>) {
    if constexpr (How == Inject::after_object) {
      return invoke_after_object(fn, context, std::forward<A>(args)...);
    } else {
      return invoke_member(fn, std::forward<A>(args)...);
    }
  } else if constexpr (How == Inject::none) {
    return std::invoke(fn, std::forward<A>(args)...);
  } else {
    return std::invoke(fn, context, std::forward<A>(args)...);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace lockon::detail
