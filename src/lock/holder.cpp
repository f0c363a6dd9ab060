#include "lock/holder.hpp"

#include "common/fork.hpp"

#include <unistd.h>

#include <atomic>
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
  static const long long start = [] {
    try {
      return compute_process_start_ms();
    } catch (...) {
      return wall_ms();
    }
  }();
  return start;
}

// getpid() is a system call on every glibc since 2.25; the pid only
// changes across fork(), which fork_generation() counts.
static long long current_pid() noexcept {
  static std::atomic<std::uint64_t> cached{0};  // generation << 32 | pid, 0 = unset
  const std::uint64_t generation = fork_generation() & 0xffffffffu;
  const std::uint64_t seen = cached.load(std::memory_order_relaxed);
  if (seen != 0 && (seen >> 32) == generation) return static_cast<long long>(seen & 0xffffffffu);
  const auto pid = static_cast<std::uint64_t>(::getpid());
  cached.store((generation << 32) | pid, std::memory_order_relaxed);
  return static_cast<long long>(pid);
}

std::string holder_record(std::string_view token, std::string_view label) {
  static const std::string host = host_name();
  std::string out(token.substr(0, 8));
  out.append("|").append(host).append("|").append(std::to_string(current_pid())).append("|");
  out.append(std::to_string(process_start_ms())).append("|").append(sanitize(label, 64)).append("|");
  out.append(std::to_string(wall_ms()));
  return out;
}

}  // namespace lockon::detail
