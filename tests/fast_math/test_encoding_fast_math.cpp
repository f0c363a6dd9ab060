// fast_math/test_encoding_fast_math.cpp — compiled with -O2 -ffast-math
// (tests/CMakeLists.txt): lock_on's encoding is header code built with the
// caller's flags, and must give the same bytes for one argument whatever
// they are. With isnan() and == 0.0 it did not: -0.0 encoded apart from 0.0
// and NaN was accepted under -ffast-math (review, session 21).
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "lockon/encoding.hpp"
#include "lockon/errors.hpp"

namespace {

using lockon::encode_args;

double from_bits(std::uint64_t bits) { return std::bit_cast<double>(bits); }

TEST(EncodingFastMath, NegativeZeroEncodesAsZero) {
  EXPECT_EQ(encode_args(from_bits(0x8000000000000000ULL)), encode_args(from_bits(0)));
  EXPECT_EQ(encode_args(-0.0f), encode_args(0.0));
}

TEST(EncodingFastMath, NanIsRefused) {
  EXPECT_THROW(encode_args(from_bits(0x7ff8000000000000ULL)), lockon::ConfigError);
  EXPECT_THROW(encode_args(from_bits(0xfff0000000000001ULL)), lockon::ConfigError);
}

TEST(EncodingFastMath, InfinitiesAndOrdinaryValuesAreKept) {
  EXPECT_NO_THROW(encode_args(from_bits(0x7ff0000000000000ULL)));
  EXPECT_NE(encode_args(1.5), encode_args(from_bits(0)));
}

}  // namespace
