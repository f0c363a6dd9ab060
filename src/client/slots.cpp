#include "client/slots.hpp"

#include <array>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace lockon::detail {
namespace {

constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit)
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    table[i] = crc;
  }
  return table;
}

constexpr auto kTable = make_table();

}  // namespace

std::uint16_t crc16(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (const char c : data)
    crc = static_cast<std::uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]);
  return crc;
}

std::string_view hashed_part(std::string_view key) noexcept {
  const auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  const auto close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

bool has_hash_tag(std::string_view key) noexcept { return hashed_part(key).size() != key.size(); }

int key_slot(std::string_view key) noexcept { return crc16(hashed_part(key)) & (kClusterSlots - 1); }

const std::string& tag_for_slot(int slot) {
  if (slot < 0 || slot >= kClusterSlots) throw std::out_of_range("hash slot out of range");
  // Built once, on first need (names containing '}' are rare): decimal
  // numbers cover all 16,384 slots well before 200,000 (checked by a test).
  static const std::vector<std::string> table = [] {
    std::vector<std::string> tags(kClusterSlots);
    int missing = kClusterSlots;
    for (int n = 0; missing > 0 && n < 10'000'000; ++n) {
      std::string text = std::to_string(n);
      std::string& tag = tags[key_slot(text)];
      if (tag.empty()) {
        tag = std::move(text);
        --missing;
      }
    }
    return tags;
  }();
  return table[static_cast<std::size_t>(slot)];
}

}  // namespace lockon::detail
