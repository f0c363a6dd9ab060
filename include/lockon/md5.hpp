// lockon/md5.hpp — MD5 (RFC 1321) usable in constant expressions.
//
// lockon names Redis keys after MD5 digests (see lockon/key.hpp). MD5 is used
// as a fixed-width, well-known *naming* function, not for security: nothing
// here resists an adversary choosing colliding inputs.
//
// This header exists so that a function's identity can be digested at
// compile time (`function_digest_ct`) and so that every platform gets the same
// digest even without OpenSSL's MD5 (e.g. a FIPS-only provider). At run time
// prefer `lockon::md5_hex` (lockon/key.hpp), which uses OpenSSL when it can.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace lockon {

/// Incremental MD5. Every member is constexpr and noexcept.
///
/// Usage: construct, `update()` any number of times, then `finish()` once.
/// Calling `update()` or `finish()` after `finish()` gives an unspecified
/// digest (no UB).
class Md5 {
 public:
  using Digest = std::array<std::uint8_t, 16>;

  constexpr Md5() noexcept = default;

  /// Appends `data` (any bytes, including NULs) to the message.
  constexpr void update(std::string_view data) noexcept {
    std::size_t i = 0;
    const std::size_t n = data.size();
    total_ += n;
    if (buffered_ != 0) {
      while (buffered_ < 64 && i < n) {
        buffer_[buffered_++] = static_cast<std::uint8_t>(data[i++]);
      }
      if (buffered_ < 64) return;
      compress(buffer_.data());
      buffered_ = 0;
    }
    // Whole blocks straight from the input: no copy through the buffer.
    for (; n - i >= 64; i += 64) compress(data.data() + i);
    while (i < n) buffer_[buffered_++] = static_cast<std::uint8_t>(data[i++]);
  }

  /// Pads the message and returns its 16-byte digest.
  constexpr Digest finish() noexcept {
    const std::uint64_t bit_length = static_cast<std::uint64_t>(total_) * 8u;
    buffer_[buffered_++] = 0x80;
    // The 8-byte length must fit after the 0x80 marker: with more than 56
    // bytes already used, it spills into one more block.
    if (buffered_ > 56) {
      while (buffered_ < 64) buffer_[buffered_++] = 0;
      compress(buffer_.data());
      buffered_ = 0;
    }
    while (buffered_ < 56) buffer_[buffered_++] = 0;
    for (int b = 0; b < 8; ++b) {
      buffer_[buffered_++] = static_cast<std::uint8_t>(bit_length >> (8 * b));
    }
    compress(buffer_.data());
    buffered_ = 0;

    Digest out{};
    for (std::size_t w = 0; w < 4; ++w) {
      for (std::size_t b = 0; b < 4; ++b) {
        out[4 * w + b] = static_cast<std::uint8_t>(state_[w] >> (8 * b));
      }
    }
    return out;
  }

 private:
  static constexpr std::array<std::uint32_t, 64> kSine = {
      0xd76aa478u, 0xe8c7b756u, 0x242070dbu, 0xc1bdceeeu, 0xf57c0fafu, 0x4787c62au, 0xa8304613u,
      0xfd469501u, 0x698098d8u, 0x8b44f7afu, 0xffff5bb1u, 0x895cd7beu, 0x6b901122u, 0xfd987193u,
      0xa679438eu, 0x49b40821u, 0xf61e2562u, 0xc040b340u, 0x265e5a51u, 0xe9b6c7aau, 0xd62f105du,
      0x02441453u, 0xd8a1e681u, 0xe7d3fbc8u, 0x21e1cde6u, 0xc33707d6u, 0xf4d50d87u, 0x455a14edu,
      0xa9e3e905u, 0xfcefa3f8u, 0x676f02d9u, 0x8d2a4c8au, 0xfffa3942u, 0x8771f681u, 0x6d9d6122u,
      0xfde5380cu, 0xa4beea44u, 0x4bdecfa9u, 0xf6bb4b60u, 0xbebfbc70u, 0x289b7ec6u, 0xeaa127fau,
      0xd4ef3085u, 0x04881d05u, 0xd9d4d039u, 0xe6db99e5u, 0x1fa27cf8u, 0xc4ac5665u, 0xf4292244u,
      0x432aff97u, 0xab9423a7u, 0xfc93a039u, 0x655b59c3u, 0x8f0ccc92u, 0xffeff47du, 0x85845dd1u,
      0x6fa87e4fu, 0xfe2ce6e0u, 0xa3014314u, 0x4e0811a1u, 0xf7537e82u, 0xbd3af235u, 0x2ad7d2bbu,
      0xeb86d391u};
  static constexpr std::array<int, 16> kShift = {7, 12, 17, 22, 5, 9,  14, 20,
                                                 4, 11, 16, 23, 6, 10, 15, 21};

  template <std::size_t I>
  static constexpr void step(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c, std::uint32_t& d,
                             const std::array<std::uint32_t, 16>& m) noexcept {
    constexpr std::size_t round = I / 16;
    std::uint32_t f = 0;
    std::size_t g = 0;
    if constexpr (round == 0) {
      f = (b & c) | (~b & d);
      g = I;
    } else if constexpr (round == 1) {
      f = (d & b) | (~d & c);
      g = (5 * I + 1) % 16;
    } else if constexpr (round == 2) {
      f = b ^ c ^ d;
      g = (3 * I + 5) % 16;
    } else {
      f = c ^ (b | ~d);
      g = (7 * I) % 16;
    }
    const std::uint32_t rotated = std::rotl(a + f + kSine[I] + m[g], kShift[round * 4 + I % 4]);
    a = d;
    d = c;
    c = b;
    b = b + rotated;
  }

  // Templated on the byte type so that both the caller's chars and our own
  // buffer can be read without reinterpret_cast (not allowed in constexpr).
  template <class Byte>
  constexpr void compress(const Byte* block) noexcept {
    std::array<std::uint32_t, 16> m{};
    for (std::size_t w = 0; w < 16; ++w) {
      m[w] = static_cast<std::uint32_t>(static_cast<std::uint8_t>(block[4 * w])) |
             static_cast<std::uint32_t>(static_cast<std::uint8_t>(block[4 * w + 1])) << 8 |
             static_cast<std::uint32_t>(static_cast<std::uint8_t>(block[4 * w + 2])) << 16 |
             static_cast<std::uint32_t>(static_cast<std::uint8_t>(block[4 * w + 3])) << 24;
    }
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    // Fully unrolled at compile time: each step gets constant indices and
    // shifts, which -O2 alone would not achieve with a runtime loop.
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (step<I>(a, b, c, d, m), ...);
    }(std::make_index_sequence<64>{});
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
  }

  std::array<std::uint32_t, 4> state_ = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::size_t total_ = 0;
};

/// MD5 digest of `data`. Usable in constant expressions.
constexpr Md5::Digest md5(std::string_view data) noexcept {
  Md5 h;
  h.update(data);
  return h.finish();
}

/// The 32 lowercase hexadecimal digits of `digest` (no terminating NUL).
constexpr std::array<char, 32> to_hex(const Md5::Digest& digest) noexcept {
  constexpr std::string_view kDigits = "0123456789abcdef";
  std::array<char, 32> out{};
  for (std::size_t i = 0; i < 16; ++i) {
    out[2 * i] = kDigits[digest[i] >> 4];
    out[2 * i + 1] = kDigits[digest[i] & 0x0f];
  }
  return out;
}

/// MD5 of `data` as 32 lowercase hex digits, computable at compile time:
///
///   constexpr auto hex = lockon::md5_hex_ct("abc");
///   static_assert(std::string_view(hex.data(), hex.size()) ==
///                 "900150983cd24fb0d6963f7d28e17f72");
///
/// `std::array<char, 32>` is a structural type, so the result may also be a
/// template argument.
constexpr std::array<char, 32> md5_hex_ct(std::string_view data) noexcept {
  return to_hex(md5(data));
}

}  // namespace lockon
