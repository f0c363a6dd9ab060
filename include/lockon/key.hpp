// lockon/key.hpp — how `lock_on` names its Redis keys.
//
// LAYOUT (frozen: changing it would let old and new processes hold "the same"
// lock under different keys, i.e. not exclude each other)
//
//   <prefix>:<md5hex(function identity)>:lock|<md5hex(encoded arguments)>
//   <prefix>:entity:lock|<md5hex(encoded arguments)>     identity dropped
//
// where md5hex is 32 lowercase hex digits and "encoded arguments" are the
// bytes of `encode_args` (lockon/encoding.hpp). Dropping the identity makes
// every function that locks the same arguments share one lock — e.g. all
// operations on one account. The prefix is any non-empty bytes ("lockon"
// by default); since everything after it has a fixed shape, a key parses
// unambiguously from the right and distinct inputs never share a key.
//
// Example: prefix "lockon", identity "transfer", arguments (42, "x"):
//   lockon:<md5hex("transfer")>:lock|<md5hex(encode_args(42, "x"))>
// (the exact strings are pinned by golden tests in tests/unit).
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "lockon/errors.hpp"
#include "lockon/md5.hpp"

namespace lockon {

/// The prefix used when none is configured.
inline constexpr std::string_view kDefaultKeyPrefix = "lockon";

/// MD5 of `data` as 32 lowercase hex digits, at run time.
///
/// Uses OpenSSL's MD5 (fetched once per process, one context per thread);
/// falls back to lockon::md5 when the loaded providers offer no MD5 (FIPS).
/// Thread-safe. Throws std::bad_alloc only.
std::string md5_hex(std::string_view data);

/// The digest naming a function's locks: md5hex(function_name).
///
/// Precondition: `function_name` is non-empty (else ConfigError). Any bytes
/// are allowed; the name is only ever hashed.
std::string function_digest(std::string_view function_name);

/// Compile-time twin of function_digest(): the same 32 hex digits.
///
///   constexpr auto d = lockon::function_digest_ct("billing::charge");
///
/// An empty name throws ConfigError, which in a constant expression is a
/// compile error.
constexpr std::array<char, 32> function_digest_ct(std::string_view function_name) {
  if (function_name.empty()) throw ConfigError("lockon: the function identity must not be empty");
  return md5_hex_ct(function_name);
}

/// Builds a lock key per the layout above.
///
/// `prefix`: non-empty. `function_digest_hex`: either 32 lowercase hex digits
/// (function_digest / function_digest_ct) or empty to drop the function
/// identity. `encoded_args`: bytes from encode_args / Encoder (hashed, never
/// embedded). Throws ConfigError for an empty prefix or a malformed digest.
/// Thread-safe.
std::string make_lock_key(std::string_view prefix, std::string_view function_digest_hex,
                          std::string_view encoded_args);

/// A human-readable description of the key layout, for `lockon key --help`
/// and logs. Stable text; ends without a newline.
std::string_view key_layout() noexcept;

}  // namespace lockon
