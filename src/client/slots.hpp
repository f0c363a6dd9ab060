// Redis Cluster's key → hash slot rule, in one place: routing (which master
// serves a key) and the lock's companion keys (which must share the lock
// key's slot) both use it, so they can never disagree.
//
// Rule (cluster-spec "Hash tags"): if the key contains a '{' and, after the
// first '{', a '}' with at least one character between them, only that
// part is hashed; otherwise the whole key. Slot = CRC16-XMODEM mod 16384.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockon::detail {

inline constexpr int kClusterSlots = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis uses it.
std::uint16_t crc16(std::string_view data) noexcept;

/// The part of `key` that Redis hashes (the hash tag, or the whole key).
std::string_view hashed_part(std::string_view key) noexcept;

/// Whether `key` has a non-empty hash tag (hashed_part is not the whole key).
bool has_hash_tag(std::string_view key) noexcept;

/// The hash slot of `key`, 0..16383.
int key_slot(std::string_view key) noexcept;

/// A short text without braces whose slot is `slot` (deterministic: the
/// smallest decimal number with that slot). For keys whose own text cannot
/// be wrapped in a tag (it contains a '}').
const std::string& tag_for_slot(int slot);

}  // namespace lockon::detail
