// support/cli_support.hpp — running the `lockon` tool (tools/, LOCKON_CLI)
// from the integration tests of test_cli_*.cpp, and the exit statuses
// docs/cli.md documents for it.
//
// Only for files compiled with LOCKON_CLI (the tool's path), which
// tests/CMakeLists.txt defines when it builds the tool.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "support/process.hpp"

namespace lockon::test {

inline const std::string kLockon = LOCKON_CLI;

// Exit statuses documented in docs/cli.md ("Exit status").
inline constexpr int kConflict = 1;        // -n found the lock held
inline constexpr int kUsage = 64;          // EX_USAGE
inline constexpr int kNotALock = 65;       // EX_DATAERR: NAME or a companion key holds another type
inline constexpr int kUnavailable = 69;    // EX_UNAVAILABLE: Redis (or a Redlock majority) unreachable
inline constexpr int kWaitTimedOut = 75;   // EX_TEMPFAIL: -w ran out
inline constexpr int kLost = 79;           // the lock was lost while COMMAND ran

/// {kLockon, args...}.
inline std::vector<std::string> lockon_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv{kLockon};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

/// Runs `lockon args...` to completion (SIGKILLed after `timeout`), with
/// `env` added to its environment.
inline ProcessResult lockon(const std::vector<std::string>& args,
                            std::chrono::milliseconds timeout = std::chrono::seconds(20),
                            const std::map<std::string, std::string>& env = {}) {
  return run_process(lockon_argv(args), timeout, env);
}

/// Starts `lockon args...` (output captured), with `env` added to its
/// environment.
inline Child spawn_lockon(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
  return spawn(lockon_argv(args), env);
}

/// The number of '\n' in `text`.
inline std::size_t line_count(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace lockon::test
