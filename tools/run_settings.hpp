// tools/run_settings.hpp — `lockon run`'s options checked and converted,
// without touching a server. Separate from run_command.cpp so the CLI fuzzer
// (tests/fuzz) can link the pure parsing alone.
#pragma once

#include <chrono>
#include <optional>

#include "cli_options.hpp"

namespace lockon::cli {

/// The validated durations of a `lockon run`.
struct RunSettings {
  std::chrono::milliseconds ttl{30'000};
  std::optional<std::chrono::milliseconds> wait{};  // empty: wait forever
  std::chrono::milliseconds kill_after{5'000};
  std::chrono::milliseconds replica_timeout{100};
};

/// True for a POSIX-portable environment variable name ([A-Za-z_][A-Za-z0-9_]*).
bool valid_env_name(const std::string& name);

/// Checks `options` (durations via lockon::parse_duration, a positive TTL, a
/// NAME, a COMMAND, a valid --fence-env name). Throws ConfigError naming the
/// first problem. Pure: no I/O, thread-safe.
RunSettings validate_run_options(const RunOptions& options);

}  // namespace lockon::cli
