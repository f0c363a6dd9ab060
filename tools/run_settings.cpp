#include "run_settings.hpp"

#include <cctype>

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

RunSettings validate_run_options(const RunOptions& options) {
  RunSettings s;
  s.ttl = parse_duration(options.ttl);
  if (s.ttl.count() <= 0) throw ConfigError("--ttl must be positive");
  if (!options.wait.empty()) s.wait = parse_duration(options.wait);
  s.kill_after = parse_duration(options.kill_after);
  s.replica_timeout = parse_duration(options.replica_timeout);
  if (options.replicas < 0) throw ConfigError("--replicas must not be negative");
  if (options.replicas > 0 && s.replica_timeout.count() <= 0)
    throw ConfigError("--replica-timeout must be positive (WAIT 0 would block forever)");
  if (options.name.empty()) throw ConfigError("the lock NAME must not be empty");
  if (options.command.empty() || options.command.front().empty()) throw ConfigError("COMMAND is missing");
  if (!options.fence_env.empty() && !valid_env_name(options.fence_env))
    throw ConfigError("--fence-env '" + options.fence_env + "' is not a valid environment variable name");
  return s;
}

}  // namespace lockon::cli
