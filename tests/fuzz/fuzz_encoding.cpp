// Fuzz target: argument encoding (lockon/encoding.hpp) and key derivation
// (lockon/key.hpp, src/lock_on/key.cpp), differentially.
//
// The input decodes into two argument tuples, modelled as trees of plain
// values. Each tree is encoded by lockon — through the typed Encoder::add
// with a fuzzer-chosen C++ spelling of every value (int8_t ... uint64_t,
// enums, std::string / string_view / const char*, float / double, chrono
// durations of several periods, std::optional, std::vector, std::set,
// std::map, std::pair, std::variant, ...) or through the runtime add_* /
// begin_* calls — and by an independent reference encoder written from the
// format comment. Properties:
//   - lockon's bytes equal the reference bytes (the frozen format v1);
//   - two tuples encode alike exactly when they are equal by value
//     (injective, and value based across spellings);
//   - encode_args(a, b) equals the tuple encoding for small typed tuples;
//   - NaN and overflowing durations throw ConfigError, nothing else throws;
//   - keys: make_lock_key is deterministic, follows the layout, differs for
//     different encodings, rejects bad prefixes/digests with ConfigError;
//     md5_hex (OpenSSL) equals the constexpr md5 at run time.
//
// The second tuple is either decoded independently, a respelling of the
// first (must encode alike) or the first with one leaf changed.
#include <fuzzer/FuzzedDataProvider.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "fuzz_check.hpp"
#include "fuzz_encoding_model.hpp"
#include "lockon/encoding.hpp"
#include "lockon/errors.hpp"
#include "lockon/key.hpp"
#include "lockon/md5.hpp"

namespace {

using lockon::fuzz::check;
using lockon::fuzz::fail;

using namespace lockon::fuzz::model;  // Kind, Node, the reference encoder

// ---- lockon's encoder, with C++ spellings --------------------------------

enum class SignedEnum : std::int64_t {};
enum class SmallEnum : std::uint8_t {};
enum PlainEnum : std::int32_t {};

template <class T>
bool fits(const Node& n) {
  if (n.negative) {
    if constexpr (std::is_signed_v<T>) {
      return n.magnitude <= std::uint64_t{0} - static_cast<std::uint64_t>(std::numeric_limits<T>::min());
    } else {
      return false;
    }
  }
  return n.magnitude <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
}

template <class T>
T as(const Node& n) {
  // Two's complement negation of the magnitude, then narrowing: exact when fits<T>.
  const std::uint64_t bits = n.negative ? std::uint64_t{0} - n.magnitude : n.magnitude;
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>(static_cast<std::int64_t>(bits));
  } else {
    return static_cast<T>(bits);
  }
}

void emit(lockon::Encoder& enc, const Node& n);

void emit_integer(lockon::Encoder& enc, const Node& n) {
  switch (n.spelling % 9) {
    case 0: if (fits<std::int8_t>(n)) return enc.add(as<std::int8_t>(n)); break;
    case 1: if (fits<std::uint16_t>(n)) return enc.add(as<std::uint16_t>(n)); break;
    case 2: if (fits<int>(n)) return enc.add(as<int>(n)); break;
    case 3: if (fits<long long>(n)) return enc.add(as<long long>(n)); break;
    case 4: if (fits<std::uint64_t>(n)) return enc.add(as<std::uint64_t>(n)); break;
    case 5: if (fits<std::int64_t>(n)) return enc.add(static_cast<SignedEnum>(as<std::int64_t>(n))); break;
    case 6: if (fits<std::uint8_t>(n)) return enc.add(static_cast<SmallEnum>(as<std::uint8_t>(n))); break;
    case 7: if (fits<std::int32_t>(n)) return enc.add(static_cast<PlainEnum>(as<std::int32_t>(n))); break;
    default: break;
  }
  if (n.negative) enc.add_int(as<std::int64_t>(n));
  else enc.add_uint(n.magnitude);
}

void emit_duration(lockon::Encoder& enc, const Node& n) {
  using namespace std::chrono;
  const auto ns_signed = [&] { return as<std::int64_t>(n); };
  switch (n.spelling % 6) {
    case 0: if (fits<std::int64_t>(n)) return enc.add(nanoseconds(ns_signed())); break;
    case 1: if (fits<std::int64_t>(n) && n.magnitude % 1000 == 0) return enc.add(microseconds(ns_signed() / 1000)); break;
    case 2: if (fits<std::int64_t>(n) && n.magnitude % 1'000'000 == 0) return enc.add(milliseconds(ns_signed() / 1'000'000)); break;
    case 3: if (fits<std::int64_t>(n) && n.magnitude % 1'000'000'000 == 0) return enc.add(seconds(ns_signed() / 1'000'000'000)); break;
    case 4: if (!n.negative) return enc.add(duration<std::uint64_t, std::nano>(n.magnitude)); break;
    default: break;
  }
  if (fits<std::int64_t>(n)) return enc.add_duration(nanoseconds(ns_signed()));
  enc.add(duration<std::uint64_t, std::nano>(n.magnitude));
}

void emit_string(lockon::Encoder& enc, const Node& n) {
  switch (n.spelling % 4) {
    case 0: return enc.add(n.text);
    case 1: return enc.add(std::string_view(n.text));
    case 2: if (n.text.find('\0') == std::string::npos) return enc.add(n.text.c_str()); break;
    default: break;
  }
  enc.add_string(n.text);
}

bool all_of_kind(const Node& n, Kind kind, std::size_t from = 0, std::size_t step = 1) {
  for (std::size_t i = from; i < n.children.size(); i += step) {
    if (n.children[i].kind != kind) return false;
  }
  return true;
}

bool all_fit_int64(const Node& n) {
  for (const auto& child : n.children) {
    if (!fits<std::int64_t>(child)) return false;
  }
  return true;
}

// Typed containers where the children allow one; false when none applies.
bool emit_typed_list(lockon::Encoder& enc, const Node& n) {
  if (all_of_kind(n, Kind::integer) && all_fit_int64(n)) {
    std::vector<std::int64_t> values;
    for (const auto& child : n.children) values.push_back(as<std::int64_t>(child));
    if (n.spelling % 3 == 1 && std::ranges::is_sorted(values) && std::ranges::adjacent_find(values) == values.end()) {
      enc.add(std::set<std::int64_t>(values.begin(), values.end()));  // same order, so the same list
    } else {
      enc.add(values);
    }
    return true;
  }
  if (all_of_kind(n, Kind::string)) {
    std::vector<std::string> values;
    for (const auto& child : n.children) values.push_back(child.text);
    enc.add(values);
    return true;
  }
  if (all_of_kind(n, Kind::boolean)) {
    std::vector<bool> values;  // the proxy-reference container
    for (const auto& child : n.children) values.push_back(child.flag);
    enc.add(values);
    return true;
  }
  return false;
}

bool emit_typed_map(lockon::Encoder& enc, const Node& n) {
  if (!all_of_kind(n, Kind::string, 0, 2) || !all_of_kind(n, Kind::integer, 1, 2) || !all_fit_int64(n)) {
    return false;
  }
  // std::map iterates in key order: usable only when the keys already are sorted and unique.
  std::map<std::string, std::int64_t> values;
  std::string previous;
  for (std::size_t i = 0; i < n.children.size(); i += 2) {
    if (i > 0 && !(previous < n.children[i].text)) return false;
    previous = n.children[i].text;
    values.emplace(n.children[i].text, as<std::int64_t>(n.children[i + 1]));
  }
  enc.add(values);
  return true;
}

bool emit_typed_composite(lockon::Encoder& enc, const Node& n) {
  switch (n.kind) {
    case Kind::list: return emit_typed_list(enc, n);
    case Kind::map: return emit_typed_map(enc, n);
    case Kind::optional:
      if (!n.flag) { enc.add(std::optional<std::string>()); return true; }
      if (n.children[0].kind == Kind::string) { enc.add(std::optional<std::string>(n.children[0].text)); return true; }
      return false;
    case Kind::tuple:
      if (n.children.size() == 2 && n.children[0].kind == Kind::string && n.children[1].kind == Kind::boolean) {
        enc.add(std::pair<std::string, bool>(n.children[0].text, n.children[1].flag));
        return true;
      }
      if (n.children.empty()) { enc.add(std::tuple<>()); return true; }
      return false;
    case Kind::variant: {
      using V = std::variant<std::monostate, std::int64_t, std::string, double>;
      const Node& c = n.children[0];
      if (n.index == 0 && c.kind == Kind::null) { enc.add(V()); return true; }
      if (n.index == 1 && c.kind == Kind::integer && fits<std::int64_t>(c)) { enc.add(V(as<std::int64_t>(c))); return true; }
      if (n.index == 2 && c.kind == Kind::string) { enc.add(V(c.text)); return true; }
      if (n.index == 3 && c.kind == Kind::real) { enc.add(V(std::in_place_index<3>, c.real)); return true; }
      return false;
    }
    default: return false;
  }
}

void emit(lockon::Encoder& enc, const Node& n) {
  switch (n.kind) {
    case Kind::integer: return emit_integer(enc, n);
    case Kind::duration: return emit_duration(enc, n);
    case Kind::string: return emit_string(enc, n);
    case Kind::boolean: return n.spelling % 2 == 0 ? enc.add(n.flag) : enc.add_bool(n.flag);
    case Kind::real:
      if (n.spelling % 2 == 0 && static_cast<double>(static_cast<float>(n.real)) == n.real) {
        return enc.add(static_cast<float>(n.real));
      }
      return enc.add(n.real);
    case Kind::null:
      switch (n.spelling % 3) {
        case 0: return enc.add(nullptr);
        case 1: return enc.add(std::monostate{});
        default: return enc.add_null();
      }
    default: break;
  }
  if (n.spelling % 2 == 0 && emit_typed_composite(enc, n)) return;
  switch (n.kind) {
    case Kind::optional: if (n.flag) enc.begin_optional(); else enc.add_nullopt(); break;
    case Kind::tuple: enc.begin_tuple(n.children.size()); break;
    case Kind::list: enc.begin_list(n.children.size()); break;
    case Kind::map: enc.begin_map(n.children.size() / 2); break;
    case Kind::variant: enc.begin_variant(n.index); break;
    default: fail("unexpected kind");
  }
  for (const auto& child : n.children) emit(enc, child);
}

// lockon's bytes for `args`, or nullopt after the ConfigError the format
// demands (NaN); anything else thrown is a failure.
std::optional<std::string> lockon_encode(const Node& args) {
  lockon::Encoder enc;
  try {
    emit(enc, args);
  } catch (const lockon::ConfigError& e) {
    check(has_nan(args), "ConfigError for an encodable value", e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    fail("encoding threw something other than ConfigError", e.what());
  }
  check(!has_nan(args), "NaN encoded without ConfigError");
  return enc.take();
}

// encode_args for the small typed shapes it can be spelled with.
void check_encode_args(const Node& args, const std::string& bytes) {
  const auto& c = args.children;
  if (c.empty()) {
    check(lockon::encode_args() == bytes, "encode_args() differs");
  } else if (c.size() == 1 && c[0].kind == Kind::string) {
    check(lockon::encode_args(c[0].text) == bytes, "encode_args(string) differs");
  } else if (c.size() == 2 && c[0].kind == Kind::integer && fits<std::int64_t>(c[0]) && c[1].kind == Kind::string) {
    check(lockon::encode_args(as<std::int64_t>(c[0]), std::string_view(c[1].text)) == bytes,
          "encode_args(int64, string_view) differs");
  } else if (c.size() == 2 && c[0].kind == Kind::boolean && c[1].kind == Kind::null) {
    check(lockon::encode_args(c[0].flag, nullptr) == bytes, "encode_args(bool, nullptr) differs");
  }
}

// ---- keys -------------------------------------------------------------------

bool is_digest(std::string_view s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string expected_key(std::string_view prefix, std::string_view digest, std::string_view encoded) {
  std::string key(prefix);
  key += digest.empty() ? std::string(":entity") : ":" + std::string(digest);
  key += ":lock|";
  key += lockon::md5_hex(encoded);
  return key;
}

// The key for `encoded`, checked against the layout; nullopt for rejected input.
std::optional<std::string> derive_key(std::string_view prefix, std::string_view digest, std::string_view encoded) {
  std::string key;
  try {
    key = lockon::make_lock_key(prefix, digest, encoded);
  } catch (const lockon::ConfigError&) {
    check(prefix.empty() || !(digest.empty() || is_digest(digest)), "make_lock_key rejected valid input");
    return std::nullopt;
  } catch (const std::exception& e) {
    fail("make_lock_key threw something other than ConfigError", e.what());
  }
  check(!prefix.empty() && (digest.empty() || is_digest(digest)), "make_lock_key accepted a bad prefix or digest");
  check(key == lockon::make_lock_key(prefix, digest, encoded), "make_lock_key is not deterministic");
  check(key == expected_key(prefix, digest, encoded), "key does not follow the layout", key);
  return key;
}

void check_md5(std::string_view bytes) {
  const std::string runtime = lockon::md5_hex(bytes);
  const auto compile_time = lockon::md5_hex_ct(bytes);  // the fallback implementation, run here
  check(runtime == std::string_view(compile_time.data(), compile_time.size()), "md5_hex differs from md5_hex_ct");
  check(is_digest(runtime), "md5_hex is not 32 lowercase hex digits");
}

void check_keys(FuzzedDataProvider& data, const std::string& a, const std::string& b, bool same) {
  std::string prefix = data.ConsumeBool() ? std::string(lockon::kDefaultKeyPrefix) : data.ConsumeRandomLengthString(12);
  std::string digest;
  switch (data.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: break;
    case 1: {
      const std::string name = data.ConsumeRandomLengthString(24);
      try {
        digest = lockon::function_digest(name);
        check(!name.empty(), "function_digest accepted an empty name");
        check(digest == lockon::md5_hex(name), "function_digest is not md5_hex of the name");
      } catch (const lockon::ConfigError&) {
        check(name.empty(), "function_digest rejected a non-empty name");
      }
      break;
    }
    default: digest = data.ConsumeRandomLengthString(34);
  }
  check_md5(a);
  const auto key_a = derive_key(prefix, digest, a);
  const auto key_b = derive_key(prefix, digest, b);
  if (key_a && key_b) check((*key_a == *key_b) == same, "keys of the two tuples collide or differ wrongly");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider data(bytes, size);
  const Node a = make_args(data);
  Node b;
  switch (data.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: b = make_args(data); break;
    case 1: b = a; respell(b, data); break;
    default: {
      b = a;
      std::uint64_t target = data.ConsumeIntegralInRange<std::uint64_t>(0, leaf_count(b) - 1);
      if (!change_leaf(b, target, data)) b.children.push_back(Node{});  // no leaf: add an argument
    }
  }
  const auto bytes_a = lockon_encode(a);
  const auto bytes_b = lockon_encode(b);
  if (!bytes_a || !bytes_b) return 0;

  std::string reference_a;
  ref_encode(reference_a, a);
  check(*bytes_a == reference_a, "encoding differs from the format v1 reference");
  check_encode_args(a, *bytes_a);
  const bool same = equal(a, b);
  check((*bytes_a == *bytes_b) == same, same ? "equal tuples encode differently" : "different tuples encode alike");
  check_keys(data, *bytes_a, *bytes_b, same);
  return 0;
}
