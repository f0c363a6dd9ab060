// Definitions for fuzz_encoding_model.hpp.
#include "fuzz_encoding_model.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

namespace lockon::fuzz::model {

// ---- decoding the input into trees -------------------------------------

static Node make_leaf(FuzzedDataProvider& data, Kind kind) {
  Node n;
  n.kind = kind;
  n.spelling = data.ConsumeIntegral<std::uint8_t>();
  switch (kind) {
    case Kind::integer:
    case Kind::duration: {
      n.negative = data.ConsumeBool();
      // Small magnitudes are interesting (they fit narrow types), so often take them.
      n.magnitude = data.ConsumeBool() ? data.ConsumeIntegralInRange<std::uint64_t>(0, 300)
                                       : data.ConsumeIntegral<std::uint64_t>();
      if (n.negative && n.magnitude > (std::uint64_t{1} << 63)) n.magnitude = std::uint64_t{1} << 63;
      if (n.magnitude == 0) n.negative = false;
      if (kind == Kind::duration && n.negative && n.magnitude > std::uint64_t{INT64_MAX}) n.magnitude = INT64_MAX;
      break;
    }
    case Kind::string: n.text = data.ConsumeRandomLengthString(24); break;
    case Kind::boolean: n.flag = data.ConsumeBool(); break;
    case Kind::real: n.real = data.ConsumeBool() ? static_cast<double>(data.ConsumeIntegralInRange<int>(-4, 4))
                                                  : data.ConsumeFloatingPoint<double>();
      break;
    default: break;
  }
  return n;
}

static Node make_node(FuzzedDataProvider& data, int depth, int& budget) {
  --budget;
  auto kind = static_cast<Kind>(data.ConsumeIntegralInRange<int>(0, kKinds - 1));
  const bool composite = kind == Kind::optional || kind == Kind::tuple || kind == Kind::list ||
                         kind == Kind::map || kind == Kind::variant;
  if (composite && (depth >= 4 || budget <= 0)) kind = Kind::string;
  if (!composite || kind == Kind::string) return make_leaf(data, kind);
  Node n;
  n.kind = kind;
  n.spelling = data.ConsumeIntegral<std::uint8_t>();
  switch (kind) {
    case Kind::optional:
      n.flag = data.ConsumeBool();
      if (n.flag) n.children.push_back(make_node(data, depth + 1, budget));
      break;
    case Kind::variant:
      n.index = data.ConsumeIntegralInRange<std::uint64_t>(0, 3);
      n.children.push_back(make_node(data, depth + 1, budget));
      break;
    default: {
      const int count = data.ConsumeIntegralInRange<int>(0, 4) * (kind == Kind::map ? 2 : 1);
      // Lists and maps are often homogeneous in C++: give them a chance to be.
      const bool same = data.ConsumeBool();
      const Node first = make_node(data, depth + 1, budget);
      for (int i = 0; i < count && budget > 0; ++i) {
        if (same && first.children.empty()) {
          Node leaf = make_leaf(data, first.kind);
          n.children.push_back(std::move(leaf));
        } else {
          n.children.push_back(i == 0 ? first : make_node(data, depth + 1, budget));
        }
      }
      if (kind == Kind::map && n.children.size() % 2 != 0) n.children.pop_back();
    }
  }
  return n;
}

// The argument tuple of a call.
Node make_args(FuzzedDataProvider& data) {
  Node args;
  args.kind = Kind::tuple;
  int budget = 24;
  const int count = data.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < count; ++i) args.children.push_back(make_node(data, 1, budget));
  return args;
}

std::uint64_t leaf_count(const Node& n) {
  std::uint64_t count = n.children.empty() ? 1 : 0;
  for (const auto& child : n.children) count += leaf_count(child);
  return count;
}

// Changes the `target`-th leaf (depth first), keeping its kind.
bool change_leaf(Node& n, std::uint64_t& target, FuzzedDataProvider& data) {
  if (n.children.empty()) {
    if (target-- != 0) return false;
    switch (n.kind) {
      case Kind::integer:
      case Kind::duration: n.magnitude = n.magnitude + 1 - 2 * (n.magnitude == INT64_MAX); n.negative = false; break;
      case Kind::string: n.text.push_back(static_cast<char>(data.ConsumeIntegral<std::uint8_t>())); break;
      case Kind::boolean: n.flag = !n.flag; break;
      case Kind::real: n.real = n.real == 1.0 ? 2.0 : 1.0; break;
      case Kind::tuple:
      case Kind::list:
      case Kind::map: n.children.push_back(Node{}); n.children.push_back(Node{}); break;
      case Kind::optional: n.flag = !n.flag; if (n.flag) n.children.push_back(Node{}); break;
      default: n.kind = Kind::boolean; break;  // null -> bool
    }
    return true;
  }
  for (auto& child : n.children) {
    if (change_leaf(child, target, data)) return true;
  }
  return false;
}

void respell(Node& n, FuzzedDataProvider& data) {
  n.spelling = data.ConsumeIntegral<std::uint8_t>();
  for (auto& child : n.children) respell(child, data);
}

// ---- equality by value ---------------------------------------------------

std::uint64_t double_bits(double d) { return std::bit_cast<std::uint64_t>(d == 0.0 ? 0.0 : d); }

bool equal(const Node& a, const Node& b) {
  if (a.kind != b.kind || a.children.size() != b.children.size()) return false;
  switch (a.kind) {
    case Kind::integer:
    case Kind::duration: if (a.negative != b.negative || a.magnitude != b.magnitude) return false; break;
    case Kind::string: if (a.text != b.text) return false; break;
    case Kind::boolean: if (a.flag != b.flag) return false; break;
    case Kind::real: if (double_bits(a.real) != double_bits(b.real)) return false; break;
    case Kind::optional: if (a.flag != b.flag) return false; break;
    case Kind::variant: if (a.index != b.index) return false; break;
    default: break;
  }
  for (std::size_t i = 0; i < a.children.size(); ++i) {
    if (!equal(a.children[i], b.children[i])) return false;
  }
  return true;
}

bool has_nan(const Node& n) {
  if (n.kind == Kind::real && std::isnan(n.real)) return true;
  for (const auto& child : n.children) {
    if (has_nan(child)) return true;
  }
  return false;
}

// ---- the reference encoder, from the format comment ---------------------

static void ref_u64(std::string& out, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void ref_encode(std::string& out, const Node& n) {
  switch (n.kind) {
    case Kind::integer: out += 'i'; out += n.negative ? '-' : '+'; ref_u64(out, n.magnitude); return;
    case Kind::duration: out += 'd'; out += n.negative ? '-' : '+'; ref_u64(out, n.magnitude); return;
    case Kind::string: out += 's'; ref_u64(out, n.text.size()); out += n.text; return;
    case Kind::boolean: out += 'b'; out += n.flag ? '\x01' : '\x00'; return;
    case Kind::real: out += 'f'; ref_u64(out, double_bits(n.real)); return;
    case Kind::null: out += 'z'; return;
    case Kind::optional: out += 'o'; out += n.flag ? '\x01' : '\x00'; break;
    case Kind::tuple: out += 't'; ref_u64(out, n.children.size()); break;
    case Kind::list: out += 'l'; ref_u64(out, n.children.size()); break;
    case Kind::map: out += 'm'; ref_u64(out, n.children.size() / 2); break;
    case Kind::variant: out += 'v'; ref_u64(out, n.index); break;
  }
  for (const auto& child : n.children) ref_encode(out, child);
}

}  // namespace lockon::fuzz::model
