// The value model of the encoding fuzzer (fuzz_encoding.cpp): argument
// tuples as trees of plain values, decoded from the fuzzer's input; equality
// by value; and an independent reference encoder written from the format
// comment of lockon/encoding.hpp. Kept apart from the part that drives
// lockon's Encoder so each file reads on its own.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lockon::fuzz::model {

enum class Kind : std::uint8_t { integer, string, boolean, real, null, optional, tuple, list, map, variant, duration };
constexpr int kKinds = 11;

// One value, by value: integers and durations as sign + magnitude (0 is
// never negative), strings as bytes. `spelling` only picks the C++ type used
// to encode it; it is not part of the value.
struct Node {
  Kind kind = Kind::null;
  bool negative = false;
  std::uint64_t magnitude = 0;  // integer, duration (ns)
  std::string text;             // string
  bool flag = false;            // boolean; optional: engaged
  double real = 0;              // real
  std::uint64_t index = 0;      // variant alternative
  std::vector<Node> children;   // optional (0/1), tuple, list, map (k, v, k, v...), variant (1)
  std::uint8_t spelling = 0;
};

/// The argument tuple of a call, decoded from the input.
Node make_args(FuzzedDataProvider& data);
std::uint64_t leaf_count(const Node& n);
/// Changes the `target`-th leaf (depth first), keeping its kind.
bool change_leaf(Node& n, std::uint64_t& target, FuzzedDataProvider& data);
/// New C++ spellings for every value (the values stay equal).
void respell(Node& n, FuzzedDataProvider& data);
/// -0.0 as +0.0, as the format writes it.
std::uint64_t double_bits(double d);
bool equal(const Node& a, const Node& b);
bool has_nan(const Node& n);
/// The format's bytes for `n`, from the format comment alone.
void ref_encode(std::string& out, const Node& n);

}  // namespace lockon::fuzz::model
