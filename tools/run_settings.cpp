#include "run_settings.hpp"

#include <cctype>
#include <string>

#include "lockon/errors.hpp"
#include "lockon/options.hpp"

namespace lockon::cli {

bool valid_env_name(const std::string& name) {
  if (name.empty() || (std::isdigit(static_cast<unsigned char>(name.front())) != 0)) return false;
  for (const char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_') return false;
  }
  return true;
}

std::chrono::milliseconds parse_cli_duration(std::string_view text, std::string_view option) {
  // flock(1) reads -w 10 as ten seconds: a bare number (fractions allowed) is
  // seconds here, unlike the library's URL parameters where it is
  // milliseconds. With a unit, parse_duration decides.
  const bool bare = !text.empty() && text.find_first_not_of("0123456789.") == std::string_view::npos;
  try {
    return parse_duration(bare ? std::string(text) + "s" : std::string(text));
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(option) + ": " + e.what());
  }
}

RunSettings validate_run_options(const RunOptions& options) {
  RunSettings s;
  s.ttl = parse_cli_duration(options.ttl, "--ttl");
  if (s.ttl < kMinimumTtl)
    throw ConfigError("--ttl " + options.ttl + " is too short: the lease is renewed every ttl/3 and a renewal " +
                      "needs a round trip; use at least " + std::to_string(kMinimumTtl.count()) + "ms");
  if (!options.wait.empty()) s.wait = parse_cli_duration(options.wait, "--wait");
  s.kill_after = parse_cli_duration(options.kill_after, "--kill-after");
  s.replica_timeout = parse_cli_duration(options.replica_timeout, "--replica-timeout");
  if (options.replicas < 0) throw ConfigError("--replicas must not be negative");
  if (options.replicas > 0 && s.replica_timeout.count() <= 0)
    throw ConfigError("--replica-timeout must be positive (WAIT 0 would block forever)");
  if (options.name.empty()) throw ConfigError("the lock NAME must not be empty");
  for (const auto& name : options.names)
    if (name.empty()) throw ConfigError("a lock NAME must not be empty");
  if (options.command.empty() || options.command.front().empty()) throw ConfigError("COMMAND is missing");
  if (!options.fence_env.empty() && !valid_env_name(options.fence_env))
    throw ConfigError("--fence-env '" + options.fence_env + "' is not a valid environment variable name");
  if (options.shared || options.exclusive || options.permits != 0) {
    const char* mode = options.shared ? "--shared" : options.exclusive ? "--exclusive" : "--permits";
    if (options.permits < 0) throw ConfigError("--permits must be at least 1");
    if (!options.fence_env.empty()) throw ConfigError(std::string("--fence-env cannot be used with ") + mode);
    if (options.replicas > 0) throw ConfigError(std::string("--replicas cannot be used with ") + mode);
    if (options.names.size() > 1) throw ConfigError(std::string(mode) + " takes one NAME (several names lock all of them with the plain lock)");
  }
  return s;
}

}  // namespace lockon::cli
