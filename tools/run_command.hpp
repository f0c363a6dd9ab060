// tools/run_command.hpp — `lockon run`: a distributed flock(1).
//
//   1. acquire the lock NAME (the Redis key itself) on one server (Lock) or a
//      majority of several (Redlock), on a helper thread while the main
//      thread stays responsive to signals;
//   2. start COMMAND, with the fence in its environment (--fence-env);
//   3. keep the lease alive (lockon's watchdog renews it every ttl/3),
//      forward SIGINT/SIGTERM/SIGHUP/SIGQUIT, and on a lost lease SIGTERM
//      (then SIGKILL) COMMAND unless --on-lost=ignore;
//   4. release the lock once COMMAND is gone and exit with its status.
//
// A signal while still waiting ends lockon at once, as that signal would (the
// lock is not taken, or — if it was just being granted — expires after its
// TTL). A lockon killed with SIGKILL leaves a lock that expires after its TTL.
#pragma once

#include "cli_options.hpp"

namespace lockon::cli {

/// Runs `lockon run`; returns the process exit status. Throws ConfigError for
/// invalid options (mapped to the usage status by main).
int run_command(const RunOptions& options);

}  // namespace lockon::cli
