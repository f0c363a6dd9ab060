#include "protocol/holder_record.hpp"

#include "common/fork.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace lockon::detail {
namespace {

long long wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// '|' separates fields; control characters would break `lockon status`'s lines.
std::string sanitize(std::string_view text, std::size_t limit) {
  std::string out(text.substr(0, limit));
  for (char& c : out)
    if (c == '|' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return out;
}

long long compute_process_start_ms() {
  // Field 22 of /proc/self/stat: start time in clock ticks since boot; the
  // command name (field 2) may hold spaces, so count from its closing ')'.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  std::ifstream boot("/proc/stat");
  long long btime = -1;
  for (std::string row; btime < 0 && std::getline(boot, row);)
    if (row.rfind("btime ", 0) == 0) btime = std::stoll(row.substr(6));
  const long ticks = sysconf(_SC_CLK_TCK);
  if (close == std::string::npos || btime < 0 || ticks <= 0) return wall_ms();
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  for (int n = 3; n <= 22 && fields >> field; ++n) {
    if (n == 22) return btime * 1000 + std::stoll(field) * 1000 / ticks;
  }
  return wall_ms();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return sanitize(name, 255);
}

}  // namespace

long long process_start_ms() {
  // Per process image: a forked child started later than its parent.
  static std::atomic<std::uint64_t> cached_generation{~std::uint64_t{0}};
  static std::atomic<long long> cached_start{0};
  const std::uint64_t generation = fork_generation();
  if (cached_generation.load(std::memory_order_acquire) == generation)
    return cached_start.load(std::memory_order_relaxed);
  long long start = 0;
  try {
    start = compute_process_start_ms();
  } catch (...) {
    start = wall_ms();
  }
  cached_start.store(start, std::memory_order_relaxed);
  cached_generation.store(generation, std::memory_order_release);
  return start;
}

std::string holder_record(std::string_view token, std::string_view label) {
  std::string out;
  assign_holder_record(out, token, label);
  return out;
}

void assign_holder_record(std::string& out, std::string_view token, std::string_view label) {
  // "|host|pid|start|" is the same for every record of a process image:
  // built once per thread and fork generation (getpid is a system call, the
  // start time a read of /proc; the record is written on every acquisition).
  struct Fixed {
    std::uint64_t generation = ~std::uint64_t{0};
    std::string middle;
  };
  thread_local Fixed fixed;
  if (const std::uint64_t generation = fork_generation(); fixed.generation != generation) {
    static const std::string host = host_name();
    fixed.middle = "|" + host + "|" + std::to_string(::getpid()) + "|" + std::to_string(process_start_ms()) + "|";
    fixed.generation = generation;
  }
  const std::string_view short_token = token.substr(0, 8);
  out.clear();
  out.reserve(short_token.size() + fixed.middle.size() + std::min<std::size_t>(label.size(), 64) + 24);
  out.append(short_token).append(fixed.middle);
  if (!label.empty()) out.append(sanitize(label, 64));
  out.push_back('|');
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), wall_ms());
  static_cast<void>(ec);
  out.append(digits, end);
}

}  // namespace lockon::detail
