// Key derivation: runtime MD5 through OpenSSL and the frozen key layout.
#include "lockon/key.hpp"

#include <openssl/evp.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "lockon/errors.hpp"
#include "lockon/md5.hpp"

namespace lockon {
namespace {

// Fetched once: in OpenSSL 3 the legacy EVP_md5() handle makes every
// EVP_DigestInit do an implicit provider fetch, which costs as much as the
// hash itself for short inputs. Never freed: it must outlive every thread's
// last use, and a process-lifetime object is not a leak.
const EVP_MD* openssl_md5() {
  static const EVP_MD* const md = EVP_MD_fetch(nullptr, "MD5", nullptr);
  return md;
}

// One context per thread, reused: EVP_MD_CTX_new is an allocation.
struct ThreadContext {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ThreadContext() = default;
  ThreadContext(const ThreadContext&) = delete;
  ThreadContext& operator=(const ThreadContext&) = delete;
  ~ThreadContext() { EVP_MD_CTX_free(ctx); }
};

Md5::Digest digest(std::string_view data) {
  if (const EVP_MD* md = openssl_md5()) {
    thread_local ThreadContext local;
    Md5::Digest out{};
    unsigned int length = 0;
    if (local.ctx != nullptr && EVP_DigestInit_ex2(local.ctx, md, nullptr) == 1 &&
        EVP_DigestUpdate(local.ctx, data.data(), data.size()) == 1 &&
        EVP_DigestFinal_ex(local.ctx, out.data(), &length) == 1 && length == out.size()) {
      return out;
    }
  }
  // No MD5 in the loaded providers (FIPS-only) or an OpenSSL failure: the
  // portable implementation gives the same bytes.
  return md5(data);
}

// Appends the 32 hex digits of md5(data) to `key`.
void append_md5_hex(std::string& key, std::string_view data) {
  const std::array<char, 32> hex = to_hex(digest(data));
  key.append(hex.data(), hex.size());
}

bool is_digest_hex(std::string_view s) noexcept {
  if (s.size() != 32) return false;
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

constexpr std::string_view kLockSeparator = ":lock|";
constexpr std::string_view kEntity = "entity";

}  // namespace

std::string md5_hex(std::string_view data) {
  std::string out;
  append_md5_hex(out, data);
  return out;
}

std::string function_digest(std::string_view function_name) {
  if (function_name.empty()) throw ConfigError("lockon: the function identity must not be empty");
  return md5_hex(function_name);
}

std::string make_lock_key(std::string_view prefix, std::string_view function_digest_hex,
                          std::string_view encoded_args) {
  if (prefix.empty()) throw ConfigError("lockon: the lock key prefix must not be empty");
  if (!function_digest_hex.empty() && !is_digest_hex(function_digest_hex)) {
    throw ConfigError("lockon: a function digest must be 32 lowercase hex digits (or empty to drop the "
                      "function identity)");
  }
  const std::string_view identity = function_digest_hex.empty() ? kEntity : function_digest_hex;
  std::string key;
  key.reserve(prefix.size() + 1 + identity.size() + kLockSeparator.size() + 32);
  key.append(prefix);
  key.push_back(':');
  key.append(identity);
  key.append(kLockSeparator);
  append_md5_hex(key, encoded_args);
  return key;
}

std::string_view key_layout() noexcept {
  return "lock key layout (lockon v1):\n"
         "  <prefix>:<md5hex(function identity)>:lock|<md5hex(encoded arguments)>\n"
         "  <prefix>:entity:lock|<md5hex(encoded arguments)>   (function identity dropped)\n"
         "md5hex: 32 lowercase hex digits. prefix: non-empty, default \"lockon\".\n"
         "encoded arguments: lockon canonical encoding v1 of the argument tuple\n"
         "  (type-tagged, length-prefixed; see lockon/encoding.hpp):\n"
         "  tuple 't' u64 count, then each value; int 'i' sign('+'|'-') u64 magnitude;\n"
         "  string 's' u64 length bytes; bool 'b' 00|01; double 'f' u64 IEEE-754 bits;\n"
         "  u64 = 8 bytes big-endian.";
}

}  // namespace lockon
