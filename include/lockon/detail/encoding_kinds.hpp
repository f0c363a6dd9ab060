// lockon/detail/encoding_kinds.hpp — how encoding.hpp classifies a C++ type.
//
// Not a public interface: included by lockon/encoding.hpp only (after
// ArgEncoder is declared). It decides, at compile time, which production of
// the format (see encoding.hpp) a type maps to, and explains the types it
// rejects; `Encoder::add` and the `Encodable` concept both read `kind_of`, so
// the two cannot disagree. Kept apart so encoding.hpp stays the readable
// contract: the format, the customization point and the Encoder.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <ranges>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

namespace lockon {

class Encoder;
template <class T>
struct ArgEncoder;

namespace detail {

template <class>
inline constexpr bool dependent_false = false;

template <class T, template <class...> class Template>
inline constexpr bool is_specialization = false;
template <template <class...> class Template, class... A>
inline constexpr bool is_specialization<Template<A...>, Template> = true;

template <class T>
inline constexpr bool is_duration = false;
template <class Rep, class Period>
inline constexpr bool is_duration<std::chrono::duration<Rep, Period>> = true;

template <class T>
inline constexpr bool is_char_array = false;
template <std::size_t N>
inline constexpr bool is_char_array<char[N]> = true;

template <class T>
concept UserEncoded = requires(Encoder& enc, const T& value) { ArgEncoder<T>::encode(enc, value); };

template <class T>
concept CharacterType = std::same_as<T, char> || std::same_as<T, wchar_t> ||
                        std::same_as<T, char8_t> || std::same_as<T, char16_t> ||
                        std::same_as<T, char32_t>;

template <class T>
concept AnyString = is_specialization<T, std::basic_string> || is_specialization<T, std::basic_string_view>;

template <class T>
concept StringLike = (AnyString<T> && std::same_as<typename T::value_type, char>) ||
                     std::same_as<T, const char*> || std::same_as<T, char*> || is_char_array<T>;

template <class T>
concept Unordered = requires {
  typename T::hasher;
  typename T::key_equal;
};

template <class T>
concept MapLike = std::ranges::range<const T> && requires {
  typename T::key_type;
  typename T::mapped_type;
};

// How a (cv-unqualified, non-reference) type is encoded. Shared by
// `Encoder::add` and the `Encodable` concept so the two cannot disagree.
// Every kind before bad_char is encodable (given encodable elements).
enum class Kind {
  user, boolean, integer, enumeration, floating, string, null, optional, variant,
  duration, map, list, tuple,
  bad_char, bad_wide_string, bad_long_double, bad_pointer, bad_duration, bad_unordered, bad_self_range, unknown,
};

template <class T>
consteval Kind kind_of() {
  if constexpr (UserEncoded<T>) return Kind::user;
  else if constexpr (std::same_as<T, bool>) return Kind::boolean;
  else if constexpr (CharacterType<T>) return Kind::bad_char;
  else if constexpr (std::integral<T> && sizeof(T) <= 8) return Kind::integer;
  else if constexpr (std::is_enum_v<T>) return Kind::enumeration;
  else if constexpr (std::same_as<T, float> || std::same_as<T, double>) return Kind::floating;
  else if constexpr (std::floating_point<T>) return Kind::bad_long_double;
  else if constexpr (StringLike<T>) return Kind::string;
  else if constexpr (AnyString<T>) return Kind::bad_wide_string;
  else if constexpr (std::is_pointer_v<T> || std::is_member_pointer_v<T>) return Kind::bad_pointer;
  else if constexpr (std::same_as<T, std::nullptr_t> || std::same_as<T, std::monostate>) return Kind::null;
  else if constexpr (is_specialization<T, std::optional>) return Kind::optional;
  else if constexpr (is_specialization<T, std::variant>) return Kind::variant;
  else if constexpr (is_duration<T>) {
    if constexpr (std::integral<typename T::rep> && !std::same_as<typename T::rep, bool> &&
                  std::ratio_divide<typename T::period, std::nano>::den == 1) {
      return Kind::duration;
    } else {
      return Kind::bad_duration;
    }
  } else if constexpr (Unordered<T>) return Kind::bad_unordered;
  else if constexpr (MapLike<T>) return Kind::map;
  else if constexpr (std::ranges::range<const T>) {
    if constexpr (std::same_as<std::remove_cvref_t<std::ranges::range_value_t<const T>>, T>) {
      return Kind::bad_self_range;
    } else {
      return Kind::list;
    }
  } else if constexpr (is_specialization<T, std::pair> || is_specialization<T, std::tuple>) {
    return Kind::tuple;
  } else {
    return Kind::unknown;
  }
}

template <class T>
consteval bool encodable();

template <class Tuple, std::size_t... I>
consteval bool all_elements_encodable(std::index_sequence<I...>) {
  return (encodable<std::remove_cv_t<std::tuple_element_t<I, Tuple>>>() && ...);
}

template <class Variant, std::size_t... I>
consteval bool all_alternatives_encodable(std::index_sequence<I...>) {
  return (encodable<std::remove_cv_t<std::variant_alternative_t<I, Variant>>>() && ...);
}

template <class T>
consteval bool encodable() {
  constexpr Kind kind = kind_of<T>();
  if constexpr (kind == Kind::optional) {
    return encodable<std::remove_cv_t<typename T::value_type>>();
  } else if constexpr (kind == Kind::variant) {
    return all_alternatives_encodable<T>(std::make_index_sequence<std::variant_size_v<T>>{});
  } else if constexpr (kind == Kind::tuple) {
    return all_elements_encodable<T>(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (kind == Kind::map) {
    return encodable<std::remove_cv_t<typename T::key_type>>() &&
           encodable<std::remove_cv_t<typename T::mapped_type>>();
  } else if constexpr (kind == Kind::list) {
    return encodable<std::remove_cv_t<std::ranges::range_value_t<const T>>>();
  } else {
    return kind < Kind::bad_char;
  }
}

// Compile-time diagnosis of an argument that is not Encodable: instantiated
// only for such a type, it descends to the innermost culprit (the element of
// a container, the alternative of a variant) and stops at a static_assert
// giving that type's reason.
template <class T>
consteval void explain_unencodable();

template <class Tuple, std::size_t... I>
consteval void explain_elements(std::index_sequence<I...>) {
  ((encodable<std::remove_cv_t<std::tuple_element_t<I, Tuple>>>()
        ? void()
        : explain_unencodable<std::remove_cv_t<std::tuple_element_t<I, Tuple>>>()),
   ...);
}

template <class Variant, std::size_t... I>
consteval void explain_alternatives(std::index_sequence<I...>) {
  ((encodable<std::remove_cv_t<std::variant_alternative_t<I, Variant>>>()
        ? void()
        : explain_unencodable<std::remove_cv_t<std::variant_alternative_t<I, Variant>>>()),
   ...);
}

template <class T>
consteval void explain_unencodable() {
  constexpr Kind kind = kind_of<T>();
  if constexpr (kind == Kind::optional) {
    explain_unencodable<std::remove_cv_t<typename T::value_type>>();
  } else if constexpr (kind == Kind::variant) {
    explain_alternatives<T>(std::make_index_sequence<std::variant_size_v<T>>{});
  } else if constexpr (kind == Kind::tuple) {
    explain_elements<T>(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (kind == Kind::map) {
    if constexpr (!encodable<std::remove_cv_t<typename T::key_type>>())
      explain_unencodable<std::remove_cv_t<typename T::key_type>>();
    else
      explain_unencodable<std::remove_cv_t<typename T::mapped_type>>();
  } else if constexpr (kind == Kind::list) {
    explain_unencodable<std::remove_cv_t<std::ranges::range_value_t<const T>>>();
  } else if constexpr (kind == Kind::bad_char) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a single character, ambiguous as a lock "
                  "argument (text or number?); pass std::string_view(&c, 1) for text or int(c) for a number");
  } else if constexpr (kind == Kind::bad_wide_string) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a wide/UTF-16/UTF-32 string; only char "
                  "strings can be lock arguments: convert it to a UTF-8 std::string");
  } else if constexpr (kind == Kind::bad_long_double) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is long double, which has no exact canonical "
                  "encoding; convert to double");
  } else if constexpr (kind == Kind::bad_pointer) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a pointer: an address means nothing to "
                  "another process; pass the pointee or an id");
  } else if constexpr (kind == Kind::bad_duration) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a duration with a floating rep or a "
                  "fractional number of nanoseconds per tick; duration_cast to std::chrono::nanoseconds");
  } else if constexpr (kind == Kind::bad_unordered) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is an unordered container, which has no "
                  "canonical order; use std::map/std::set or a sorted std::vector");
  } else if constexpr (kind == Kind::bad_self_range) {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a range of itself (e.g. "
                  "std::filesystem::path); pass its string form");
  } else {
    static_assert(dependent_false<T>,
                  "lockon: T (named in this instantiation) is a type lockon has no encoding for; "
                  "specialize lockon::ArgEncoder<T> for it (see lockon/encoding.hpp)");
  }
}

// Instantiated by lock_on for each locked position: for an argument that
// cannot be encoded, the compiler's instantiation note names Position (the
// argument's index) and Arg (its type), and explain_unencodable the reason.
template <std::size_t Position, class Arg>
consteval bool lock_argument_is_encodable() {
  if constexpr (!encodable<std::remove_cvref_t<Arg>>()) explain_unencodable<std::remove_cvref_t<Arg>>();
  return true;
}

// Tags of the wire format (see the top of this file).
inline constexpr char kTagInteger = 'i';
inline constexpr char kTagString = 's';
inline constexpr char kTagBool = 'b';
inline constexpr char kTagDouble = 'f';
inline constexpr char kTagNull = 'z';
inline constexpr char kTagOptional = 'o';
inline constexpr char kTagTuple = 't';
inline constexpr char kTagList = 'l';
inline constexpr char kTagMap = 'm';
inline constexpr char kTagVariant = 'v';
inline constexpr char kTagDuration = 'd';
inline constexpr char kTagUser = 'x';

}  // namespace detail

}  // namespace lockon
