// tools/run_settings.hpp — `lockon run`'s options checked and converted,
// without touching a server. Separate from run_command.cpp so the CLI fuzzer
// (tests/fuzz) can link the pure parsing alone.
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "cli_options.hpp"

namespace lockon::cli {

/// The validated durations of a `lockon run`.
struct RunSettings {
  std::chrono::milliseconds ttl{30'000};
  std::optional<std::chrono::milliseconds> wait{};  // empty: wait forever
  std::chrono::milliseconds kill_after{5'000};
};

/// The shortest --ttl accepted: renewals run every ttl/3, so 300ms leaves
/// 100ms for a renewal round trip (plus scheduling) before the next is due;
/// anything shorter expires under ordinary network jitter.
inline constexpr std::chrono::milliseconds kMinimumTtl{300};

/// A CLI duration: a bare number is seconds, like flock(1)'s -w ("10",
/// "0.5"); with a unit as lockon::parse_duration ("500ms", "2m"). Throws
/// ConfigError naming `option`.
std::chrono::milliseconds parse_cli_duration(std::string_view text, std::string_view option);

/// True for a POSIX-portable environment variable name ([A-Za-z_][A-Za-z0-9_]*).
bool valid_env_name(const std::string& name);

/// Checks `options` (durations via parse_cli_duration, a TTL of at least kMinimumTtl, a
/// NAME, a COMMAND, a valid --fence-env name). Throws ConfigError naming the
/// first problem. Pure: no I/O, thread-safe.
RunSettings validate_run_options(const RunOptions& options);

}  // namespace lockon::cli
