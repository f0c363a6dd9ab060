// lockon/encoding.hpp — the canonical, injective encoding of lock arguments.
//
// `lock_on<I...>(fn)` serializes the selected arguments with `encode_args`
// and names the lock after the MD5 of those bytes (lockon/key.hpp). The
// encoding is *injective*: two argument lists of different value encode
// differently, unlike the `':'.join(str(a) for a in args)` it replaces, where
// ("a:b") and ("a", "b") shared a lock. It is also *value based*: the same
// value spelled with another C++ type (int vs. long long, std::string vs.
// const char*, 1s vs. 1000ms) encodes alike, so callers need not agree on
// exact types.
//
// FORMAT (version 1; frozen — keys of existing locks depend on it)
//
// Every value is one tag byte followed by a payload. `u64` is an unsigned
// 64-bit integer in 8 bytes, big-endian. Tags are ASCII letters.
//
//   value    = integer | string | bool | double | null | optional
//            | tuple | list | map | variant | duration | user
//   integer  = 'i' sign u64          sign '+' (0x2B) for >= 0, '-' (0x2D) for
//                                    < 0; u64 is the magnitude |v| (so 0 is
//                                    always "+0" and INT64_MIN is '-' 2^63)
//   string   = 's' u64 bytes         byte count, then the raw bytes (any
//                                    bytes, NULs included; no terminator)
//   bool     = 'b' 0x00 | 'b' 0x01
//   double   = 'f' u64               IEEE-754 binary64 bit pattern; -0.0 is
//                                    written as +0.0; NaN is rejected
//   null     = 'z'                   std::nullptr_t, std::monostate
//   optional = 'o' 0x00 | 'o' 0x01 value
//   tuple    = 't' u64 value*        element count, then the elements
//   list     = 'l' u64 value*        element count, then the elements
//   map      = 'm' u64 (value value)*  entry count, then key, value, ...
//   variant  = 'v' u64 value         alternative index, then the alternative
//   duration = 'd' sign u64          like integer, in nanoseconds
//   user     = 'x' u64 bytes         byte count, then what ArgEncoder<T>
//                                    wrote (itself a sequence of values)
//
// The argument list of a call is a tuple: `encode_args(42, "x")` is
//   't' 00 00 00 00 00 00 00 02
//   'i' '+' 00 00 00 00 00 00 00 2A
//   's' 00 00 00 00 00 00 00 01 'x'
// Every production is self-delimiting, so concatenation stays injective.
//
// C++ TYPE MAPPING
//
//   bool                                   -> bool (never equal to 0/1)
//   signed char, unsigned char, short, int, long, long long and unsigned
//   variants (int8_t ... uint64_t)         -> integer, by value
//   enums (scoped or not)                  -> integer, by underlying value
//   float, double                          -> double (a float widens exactly)
//   std::string, std::string_view (any traits/allocator), const char*,
//   char*, char[N]                         -> string. A char array is read up
//                                             to its first NUL (as if it
//                                             decayed to const char*), so a
//                                             literal loses its terminator
//   std::nullptr_t, std::monostate         -> null
//   std::optional<T>                       -> optional
//   std::pair, std::tuple                  -> tuple
//   std::map, std::multimap (any type with key_type and mapped_type)
//                                          -> map, in iteration order
//   other ranges: std::vector, std::array, std::span, std::deque, std::list,
//   std::set, std::multiset, views ...     -> list, in iteration order
//                                             (so std::set{1,2} equals
//                                             std::vector{1,2})
//   std::variant                           -> variant
//   std::chrono::duration with an integral rep and a period that is a whole
//   number of nanoseconds                  -> duration (1s == 1000ms)
//   a type with an ArgEncoder<T> specialization -> user (takes precedence)
//
// Rejected at compile time (with a message naming the fix): plain char,
// wchar_t, char8_t, char16_t, char32_t (text or number? say which), strings
// of those (convert to UTF-8 std::string), integers wider than 64 bits, long
// double (no exact double), pointers other than char pointers (an address
// means nothing to another process), unordered containers (no canonical
// order), floating-point or sub-nanosecond durations, ranges whose elements
// are their own type (std::filesystem::path: pass .string()), anything else
// without an ArgEncoder. `Encodable<T>` tells beforehand.
//
// Rejected at run time with ConfigError: a null `const char*`, NaN, a
// duration beyond ±(2^64 - 1) ns (about 584 years), a valueless variant.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ranges>
#include <ratio>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "lockon/errors.hpp"

namespace lockon {

class Encoder;

/// Customization point: how to encode a user type as a lock argument.
///
/// Specialize it with a static `encode` that appends the fields which make up
/// the value's identity:
///
///   template <>
///   struct lockon::ArgEncoder<Account> {
///     static void encode(lockon::Encoder& enc, const Account& a) {
///       enc.add(a.bank);      // any encodable value, user types included
///       enc.add(a.number);
///     }
///   };
///
/// lockon wraps whatever `encode` writes in its own tag and length, so it can
/// never collide with a built-in value nor bleed into the next argument. Two
/// user types whose encoders write the same values do encode alike; add a
/// distinguishing string if that matters. A specialization takes precedence
/// over the built-in mapping, so do not specialize it for standard types
/// (that would silently change their keys).
template <class T>
struct ArgEncoder {};

}  // namespace lockon

// The type classification (kind_of, Encodable's machinery, the diagnosis of
// rejected types) lives apart; it needs ArgEncoder declared above.
#include "lockon/detail/encoding_kinds.hpp"

namespace lockon {

/// True when `T` (after removing cv and references) has an encoding, built-in
/// or through ArgEncoder. Containers are encodable when their elements are.
template <class T>
concept Encodable = detail::encodable<std::remove_cvref_t<T>>();

/// Appends canonical encodings of values to a byte string.
///
/// The typed `add()` covers every Encodable type. The runtime `add_*` and
/// `begin_*` members write the same bytes from untyped input, so a tool (the
/// `lockon key` command) can reproduce a program's key from text: e.g.
/// `begin_tuple(2); add_int(42); add_string("x");` equals
/// `encode_args(42, std::string("x"))`.
///
/// Not thread-safe; cheap to create. Nothing is validated across calls: a
/// `begin_*` announcing N elements must be followed by exactly N values (2N
/// for a map), otherwise the bytes are not a valid encoding.
class Encoder {
 public:
  Encoder() = default;
  /// Writes into `buffer`'s storage (its contents are cleared first), so a
  /// caller encoding again and again can reuse one allocation.
  explicit Encoder(std::string buffer) noexcept : out_(std::move(buffer)) { out_.clear(); }

  /// Reserves room for `bytes` more bytes of output.
  void reserve(std::size_t bytes) { out_.reserve(out_.size() + bytes); }

  /// Integers compare by value: add_int(42) == add_uint(42).
  void add_int(std::int64_t value) {
    if (value < 0) {
      put_signed(detail::kTagInteger, true, std::uint64_t{0} - static_cast<std::uint64_t>(value));
    } else {
      put_signed(detail::kTagInteger, false, static_cast<std::uint64_t>(value));
    }
  }
  void add_uint(std::uint64_t value) { put_signed(detail::kTagInteger, false, value); }

  /// Any bytes; the length is recorded so embedded separators and NULs are
  /// harmless.
  void add_string(std::string_view text) {
    out_.push_back(detail::kTagString);
    put_u64(text.size());
    out_.append(text);
  }

  void add_bool(bool value) {
    const char bytes[2] = {detail::kTagBool, value ? '\x01' : '\x00'};
    out_.append(bytes, 2);
  }

  /// Throws ConfigError for NaN (it equals nothing, so it cannot name a lock).
  /// -0.0 encodes as 0.0; infinities are allowed.
  /// Decided on the bits, not with isnan() or == 0.0: this header is
  /// compiled with the caller's flags, and under -ffast-math those let NaN
  /// through and kept -0.0 apart, so builds with different flags locked
  /// different keys for one argument (review, session 21).
  void add_double(double value) {
    std::uint64_t bits = std::bit_cast<std::uint64_t>(value);
    constexpr std::uint64_t kExponent = 0x7ff0000000000000ULL;
    constexpr std::uint64_t kMantissa = 0x000fffffffffffffULL;
    if ((bits & kExponent) == kExponent && (bits & kMantissa) != 0)
      throw ConfigError("lockon: NaN cannot be encoded as a lock argument");
    if ((bits << 1) == 0) bits = 0;  // folds -0.0 into +0.0
    out_.push_back(detail::kTagDouble);
    put_u64(bits);
  }

  /// std::nullptr_t / std::monostate.
  void add_null() { out_.push_back(detail::kTagNull); }

  /// An empty std::optional.
  void add_nullopt() {
    const char bytes[2] = {detail::kTagOptional, '\x00'};
    out_.append(bytes, 2);
  }
  /// An engaged std::optional; exactly one value must follow.
  void begin_optional() {
    const char bytes[2] = {detail::kTagOptional, '\x01'};
    out_.append(bytes, 2);
  }

  /// A tuple (and the argument list itself) of `count` values that follow.
  void begin_tuple(std::uint64_t count) { put_header(detail::kTagTuple, count); }
  /// A sequence container of `count` values that follow.
  void begin_list(std::uint64_t count) { put_header(detail::kTagList, count); }
  /// A map of `entries` key/value pairs: 2 * entries values follow.
  void begin_map(std::uint64_t entries) { put_header(detail::kTagMap, entries); }
  /// Alternative `index` of a std::variant; exactly one value must follow.
  void begin_variant(std::uint64_t index) { put_header(detail::kTagVariant, index); }

  /// A duration, canonically in nanoseconds.
  void add_duration(std::chrono::nanoseconds value) {
    const std::int64_t ns = value.count();
    put_signed(detail::kTagDuration, ns < 0,
               ns < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns));
  }

  /// Appends the canonical encoding of `value` (see the table at the top of
  /// this file). Throws ConfigError for the run-time rejections listed
  /// there; after a throw the output holds a partial value.
  template <class T>
  void add(const T& value);

  /// The bytes written so far.
  const std::string& bytes() const noexcept { return out_; }
  /// Moves the bytes out, leaving the encoder empty and reusable.
  std::string take() noexcept {
    std::string result = std::move(out_);
    out_.clear();
    return result;
  }
  void clear() noexcept { out_.clear(); }

 private:
  void put_u64(std::uint64_t v) {
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(v >> (56 - 8 * i));
    out_.append(bytes, 8);
  }
  void put_header(char tag, std::uint64_t n) {
    out_.push_back(tag);
    put_u64(n);
  }
  void put_signed(char tag, bool negative, std::uint64_t magnitude) {
    const char head[2] = {tag, negative ? '-' : '+'};
    out_.append(head, 2);
    put_u64(magnitude);
  }
  // Writes tag + a zero count and returns where the count lives, for
  // containers and user payloads whose size is only known afterwards.
  std::size_t open(char tag) {
    out_.push_back(tag);
    const std::size_t at = out_.size();
    put_u64(0);
    return at;
  }
  void patch(std::size_t at, std::uint64_t n) noexcept {
    for (std::size_t i = 0; i < 8; ++i) out_[at + i] = static_cast<char>(n >> (56 - 8 * i));
  }

  template <class Tuple, std::size_t... I>
  void add_elements(const Tuple& t, std::index_sequence<I...>) {
    (add(std::get<I>(t)), ...);
  }

  std::string out_;
};

template <class T>
void Encoder::add(const T& value) {
  using U = std::remove_cv_t<T>;
  constexpr detail::Kind kind = detail::kind_of<U>();
  using detail::Kind;
  if constexpr (kind == Kind::user) {
    const std::size_t at = open(detail::kTagUser);
    ArgEncoder<U>::encode(*this, value);
    patch(at, out_.size() - (at + 8));
  } else if constexpr (kind == Kind::boolean) {
    add_bool(value);
  } else if constexpr (kind == Kind::integer) {
    if constexpr (std::is_signed_v<U>) add_int(value);
    else add_uint(value);
  } else if constexpr (kind == Kind::enumeration) {
    using Under = std::underlying_type_t<U>;
    if constexpr (std::is_signed_v<Under>) add_int(static_cast<std::int64_t>(value));
    else add_uint(static_cast<std::uint64_t>(value));
  } else if constexpr (kind == Kind::floating) {
    add_double(static_cast<double>(value));
  } else if constexpr (kind == Kind::string) {
    if constexpr (std::is_pointer_v<U>) {
      if (value == nullptr) throw ConfigError("lockon: a null const char* cannot be encoded as a lock argument");
      add_string(std::string_view(value));
    } else if constexpr (detail::is_char_array<U>) {
      add_string(std::string_view(value, static_cast<std::size_t>(
                                             std::find(value, value + std::extent_v<U>, '\0') - value)));
    } else {
      add_string(std::string_view(value.data(), value.size()));
    }
  } else if constexpr (kind == Kind::null) {
    add_null();
  } else if constexpr (kind == Kind::optional) {
    if (value.has_value()) {
      begin_optional();
      add(*value);
    } else {
      add_nullopt();
    }
  } else if constexpr (kind == Kind::variant) {
    if (value.valueless_by_exception()) {
      throw ConfigError("lockon: a valueless std::variant cannot be encoded as a lock argument");
    }
    begin_variant(value.index());
    std::visit([this](const auto& alternative) { this->add(alternative); }, value);
  } else if constexpr (kind == Kind::duration) {
    using Factor = std::ratio_divide<typename U::period, std::nano>;  // ns per tick, an integer
    const auto count = value.count();
    bool negative = false;
    if constexpr (std::is_signed_v<typename U::rep>) negative = count < 0;
    const std::uint64_t ticks = negative ? std::uint64_t{0} - static_cast<std::uint64_t>(count)
                                         : static_cast<std::uint64_t>(count);
    std::uint64_t ns = 0;
    if (__builtin_mul_overflow(ticks, static_cast<std::uint64_t>(Factor::num), &ns)) {
      throw ConfigError("lockon: duration argument too large to encode in nanoseconds");
    }
    put_signed(detail::kTagDuration, negative && ns != 0, ns);
  } else if constexpr (kind == Kind::map) {
    const std::size_t at = open(detail::kTagMap);
    std::uint64_t n = 0;
    for (const auto& [key, mapped] : value) {
      add(key);
      add(mapped);
      ++n;
    }
    patch(at, n);
  } else if constexpr (kind == Kind::list) {
    using Element = std::ranges::range_value_t<const U>;
    const std::size_t at = open(detail::kTagList);
    std::uint64_t n = 0;
    // The cast materializes proxies (std::vector<bool>) as the value type.
    for (auto&& element : value) {
      add(static_cast<const Element&>(element));
      ++n;
    }
    patch(at, n);
  } else if constexpr (kind == Kind::tuple) {
    constexpr std::size_t n = std::tuple_size_v<U>;
    begin_tuple(n);
    add_elements(value, std::make_index_sequence<n>{});
  } else if constexpr (kind == Kind::bad_char) {
    static_assert(detail::dependent_false<T>,
                  "lockon: a single character is ambiguous as a lock argument (text or number?); "
                  "pass std::string_view(&c, 1) for text or int(c) for a number");
  } else if constexpr (kind == Kind::bad_wide_string) {
    static_assert(detail::dependent_false<T>,
                  "lockon: only char strings can be lock arguments; convert wide/UTF-16/UTF-32 text "
                  "to a UTF-8 std::string");
  } else if constexpr (kind == Kind::bad_long_double) {
    static_assert(detail::dependent_false<T>,
                  "lockon: long double has no exact canonical encoding; convert to double");
  } else if constexpr (kind == Kind::bad_pointer) {
    static_assert(detail::dependent_false<T>,
                  "lockon: pointers cannot be lock arguments (an address means nothing to another "
                  "process); pass the pointee or an id");
  } else if constexpr (kind == Kind::bad_duration) {
    static_assert(detail::dependent_false<T>,
                  "lockon: only durations with an integral rep and a whole number of nanoseconds per "
                  "tick can be encoded; duration_cast to std::chrono::nanoseconds");
  } else if constexpr (kind == Kind::bad_unordered) {
    static_assert(detail::dependent_false<T>,
                  "lockon: unordered containers have no canonical order; use std::map/std::set or a "
                  "sorted std::vector");
  } else if constexpr (kind == Kind::bad_self_range) {
    static_assert(detail::dependent_false<T>,
                  "lockon: a range whose elements are of its own type (e.g. std::filesystem::path) "
                  "cannot be encoded; pass its string form");
  } else {
    static_assert(detail::dependent_false<T>,
                  "lockon: no encoding for this argument type; specialize lockon::ArgEncoder<T> "
                  "(see lockon/encoding.hpp)");
  }
}

namespace detail {

// A cheap upper-ish estimate so encode_args allocates once in common cases.
template <class T>
std::size_t size_hint(const T& value) noexcept {
  if constexpr (is_specialization<T, std::basic_string> || is_specialization<T, std::basic_string_view>) {
    if constexpr (std::same_as<typename T::value_type, char>) return 9 + value.size();
    else return 16;
  } else if constexpr (is_char_array<T>) {
    return 9 + std::extent_v<T>;
  } else {
    return 16;
  }
}

}  // namespace detail

/// The canonical encoding of an argument list: a tuple of `sizeof...(Args)`
/// values, so the count is part of the bytes (`encode_args()` differs from
/// `encode_args(std::tuple<>{})`).
///
/// Compile error (static_assert with a message) for a type that is not
/// Encodable. Throws ConfigError for NaN, a null `const char*`, an
/// out-of-range duration or a valueless variant. Allocates once for typical
/// arguments.
template <class... Args>
std::string encode_args(const Args&... args) {
  Encoder enc;
  enc.reserve(9 + (std::size_t{0} + ... + detail::size_hint(args)));
  enc.begin_tuple(sizeof...(Args));
  (enc.add(args), ...);
  return enc.take();
}

/// encode_args(args...) written over `out`, reusing its storage. If an
/// argument cannot be encoded (ConfigError), `out` is left empty.
template <class... Args>
void encode_args_into(std::string& out, const Args&... args) {
  Encoder enc(std::move(out));
  out.clear();  // a moved-from string's state is unspecified
  enc.reserve(9 + (std::size_t{0} + ... + detail::size_hint(args)));
  enc.begin_tuple(sizeof...(Args));
  (enc.add(args), ...);
  out = enc.take();
}

}  // namespace lockon
