// The constexpr MD5 against RFC 1321's vectors (at compile time) and against
// OpenSSL (at run time, every length across the block-padding boundaries).
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "lockon/key.hpp"
#include "lockon/md5.hpp"

namespace {

constexpr bool md5_is(std::string_view input, std::string_view expected_hex) {
  const std::array<char, 32> hex = lockon::md5_hex_ct(input);
  return std::string_view(hex.data(), hex.size()) == expected_hex;
}

// RFC 1321, appendix A.5.
static_assert(md5_is("", "d41d8cd98f00b204e9800998ecf8427e"));
static_assert(md5_is("a", "0cc175b9c0f1b6a831c399e269772661"));
static_assert(md5_is("abc", "900150983cd24fb0d6963f7d28e17f72"));
static_assert(md5_is("message digest", "f96b697d7cb7938d525a2f31aaf161d0"));
static_assert(md5_is("abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"));
static_assert(md5_is("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                     "d174ab98d277d9f5a5611c2c9f419d9f"));
static_assert(md5_is("12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                     "57edf4a22be3c955ac49da2e2107b67a"));

// Padding edges: 55 bytes is the longest message whose length still fits in
// its last block, 56 spills into a second one, 64 is exactly one block.
constexpr std::array<char, 128> kXsStorage = [] {
  std::array<char, 128> xs{};
  for (char& c : xs) c = 'x';
  return xs;
}();
constexpr std::string_view kXs(kXsStorage.data(), kXsStorage.size());
static_assert(kXs.size() == 128);
static_assert(md5_is(kXs.substr(0, 55), "04364420e25c512fd958a70738aa8f72"));
static_assert(md5_is(kXs.substr(0, 56), "668a72d5ba17f08e62dabcafad6db14b"));
static_assert(md5_is(kXs.substr(0, 63), "7dc2ca208106a2f703567bdff99d8981"));
static_assert(md5_is(kXs.substr(0, 64), "c1bb4f81d892b2d57947682aeb252456"));
static_assert(md5_is(kXs.substr(0, 65), "1bc932052302d074bdec39795fe00cf6"));
static_assert(md5_is(kXs.substr(0, 119), "ab347a5f68c8a443cfcddc633f12c24f"));
static_assert(md5_is(kXs.substr(0, 120), "fb98667f98096de92620b64f46e1c5b5"));
static_assert(md5_is(kXs, "d69cb61a6ee87200676eb0d4b90edbcb"));

// Incremental updates that straddle blocks give the one-shot digest.
constexpr bool chunked_matches() {
  lockon::Md5 h;
  h.update(kXs.substr(0, 3));
  h.update(kXs.substr(3, 70));
  h.update("");
  h.update(kXs.substr(73));
  return h.finish() == lockon::md5(kXs);
}
static_assert(chunked_matches());

// The compile-time function digest is the runtime one.
static_assert(lockon::function_digest_ct("abc") == lockon::md5_hex_ct("abc"));

// Independent of lockon::md5_hex, which may itself fall back to lockon::md5.
std::string openssl_md5_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_md5(), nullptr) != 1) {
    ADD_FAILURE() << "OpenSSL MD5 failed";
    return {};
  }
  std::string hex;
  constexpr std::string_view kDigits = "0123456789abcdef";
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kDigits[digest[i] >> 4]);
    hex.push_back(kDigits[digest[i] & 0x0f]);
  }
  return hex;
}

std::string ct_hex(std::string_view data) {
  const std::array<char, 32> hex = lockon::md5_hex_ct(data);
  return std::string(hex.data(), hex.size());
}

TEST(Md5, MatchesOpenSslForEveryLengthUpTo300) {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::size_t length = 0; length <= 300; ++length) {
    for (int trial = 0; trial < 3; ++trial) {
      std::string data(length, '\0');
      for (char& c : data) c = static_cast<char>(byte(rng));
      const std::string expected = openssl_md5_hex(data);
      ASSERT_EQ(ct_hex(data), expected) << "length " << length;
      ASSERT_EQ(lockon::md5_hex(data), expected) << "length " << length;
    }
  }
}

TEST(Md5, EveryByteValue) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ct_hex(all), openssl_md5_hex(all));
  EXPECT_EQ(lockon::md5_hex(all), openssl_md5_hex(all));
}

TEST(Md5, IncrementalMatchesOneShotForRandomSplits) {
  std::mt19937_64 rng(7);
  std::string data(1000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t length = rng() % data.size();
    const std::string_view message(data.data(), length);
    lockon::Md5 h;
    std::size_t at = 0;
    while (at < length) {
      const std::size_t chunk = std::min<std::size_t>(rng() % 130, length - at);
      h.update(message.substr(at, chunk));
      at += chunk;
    }
    ASSERT_EQ(h.finish(), lockon::md5(message)) << "length " << length;
  }
}

TEST(Md5, RuntimeHexIsLowercase) {
  EXPECT_EQ(lockon::md5_hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(lockon::md5_hex(std::string_view("a\0b", 3)), openssl_md5_hex(std::string_view("a\0b", 3)));
}

TEST(Md5, FunctionDigest) {
  EXPECT_EQ(lockon::function_digest("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_THROW(lockon::function_digest(""), lockon::ConfigError);
  EXPECT_THROW(static_cast<void>(lockon::function_digest_ct("")), lockon::ConfigError);
}

}  // namespace
