// tools/child.hpp — starting COMMAND and describing how it ended.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace lockon::cli {

/// Records the descriptors open when lockon started. COMMAND inherits those
/// (like with flock(1), `lockon run k -- cmd 3>file` passes fd 3 on) but
/// never lockon's own Redis sockets and pipes. Call first thing in main().
void remember_inherited_fds();

/// Starts `argv` (argv[0] looked up in PATH) with this process's environment
/// plus `extra_env` ("NAME=value", replacing a variable of that name), an
/// empty signal mask and default dispositions for `reset_signals`, in this
/// process's process group. The child is bound to this process: it gets
/// SIGKILL when the calling *thread* ends (PR_SET_PDEATHSIG; call it from
/// the main thread), including when lockon itself is SIGKILLed, and it does
/// not exec at all if lockon already died before the binding was armed.
/// Its own children are not bound (see docs/cli.md). Blocks until the exec
/// succeeded or failed. Returns the PID, or -1 with `error` set to the errno
/// of the failed fork/exec (ENOENT: not found, EACCES: not executable).
pid_t spawn_command(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                    const sigset_t& reset_signals, int& error);

/// The shell's view of a wait status: the exit code, or 128 + signal.
int shell_status(int wait_status) noexcept;

/// "exited with status 3", "was killed by SIGKILL".
std::string describe_status(int wait_status);

}  // namespace lockon::cli
