// support/process.hpp — starting child processes that cannot outlive the test.
//
// Every child (redis-server, lockon_test_worker, /bin/sh...) is forked by one
// long-lived "launcher" thread and gets PR_SET_PDEATHSIG=SIGKILL before exec.
// Linux ties that signal to the *thread* that forked, so forking from a
// short-lived test thread would kill the child when that thread ends; forking
// from a thread that lives as long as the process makes the child die exactly
// when the test process dies (crash, SIGKILL by a ctest timeout, ...).
//
// Children get stdin from /dev/null, no inherited descriptors beyond 0-2 (a
// leaked hiredis socket would keep a connection open behind the test's back),
// default signal dispositions and an empty signal mask.
//
// No GoogleTest here: benchmarks reuse this.
#pragma once

#include <sys/types.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::test {

/// How a child ended.
struct ProcessResult {
  /// Exit status when it exited normally, -1 otherwise.
  int exit_code = -1;
  /// The signal that terminated it, 0 when it exited normally.
  int signal = 0;
  /// True when the harness SIGKILLed it because its time limit passed.
  bool timed_out = false;
  /// Everything it wrote. (Not named stdout/stderr: those are C macros.)
  std::string out;
  std::string err;
  /// From spawn to reap.
  std::chrono::milliseconds elapsed{0};

  /// Exited on its own with status 0.
  bool succeeded() const { return !timed_out && signal == 0 && exit_code == 0; }
  /// "exit 3", "killed by signal 9 (timed out after 200 ms)"... plus the
  /// captured output, for assertion messages.
  std::string describe() const;
};

/// Low-level: forks `argv` through the launcher thread and returns its PID.
/// `argv[0]` without a '/' is looked up in PATH. The child's environment is
/// this process's plus `extra_env` (which wins). Its stdout/stderr go to
/// `stdout_fd` / `stderr_fd` (descriptors of this process, e.g. an open log
/// file). Throws std::runtime_error if the program cannot be executed (the
/// exec error is reported back through a pipe, so "no such file" is loud).
pid_t spawn_raw(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& extra_env, int stdout_fd,
                int stderr_fd);

/// Waits up to `timeout` for `pid` (a child of this process) to end and
/// reaps it. Returns its raw wait status, or nullopt if it is still running.
/// A pid that was already reaped elsewhere counts as ended (status 0).
std::optional<int> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);

/// Creates a fresh private directory under $TMPDIR (or /tmp), e.g.
/// "/tmp/lockon-redis-Ab12Cd". Throws std::runtime_error on failure.
std::filesystem::path make_temp_dir(std::string_view prefix);

/// Reads a whole file ("" if missing). Used for captured output and logs.
std::string read_file(const std::filesystem::path& path);

/// A running child whose stdout/stderr are captured to files (never a pipe,
/// so a chatty child can never block on a full pipe). Move-only. The
/// destructor SIGKILLs and reaps it if it is still running.
class Child {
 public:
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  /// The child's PID (still valid after it was reaped, for messages).
  pid_t pid() const noexcept { return pid_; }
  /// False once it has ended (reaps it if it just did).
  bool running();
  /// Sends `sig` (default SIGKILL) without waiting. No-op once reaped.
  void kill(int sig = SIGKILL);
  /// Waits up to `timeout` for it to end on its own; SIGKILLs it when the
  /// time passes (then `timed_out` is set). Always returns a reaped result.
  ProcessResult wait(std::chrono::milliseconds timeout);
  /// Waits up to `timeout`; nullopt if it is still running (not killed).
  std::optional<ProcessResult> try_wait(std::chrono::milliseconds timeout);
  /// What it wrote so far.
  std::string stdout_text() const;
  std::string stderr_text() const;
  /// Polls stdout (every few ms) until it contains `needle`. False if the
  /// time passes or the child ends without writing it.
  bool wait_for_output(std::string_view needle, std::chrono::milliseconds timeout);

 private:
  friend Child spawn(const std::vector<std::string>&, const std::map<std::string, std::string>&);
  Child(pid_t pid, std::filesystem::path dir);
  ProcessResult result_from_status(int status, bool timed_out) const;
  void release() noexcept;

  pid_t pid_ = -1;
  bool reaped_ = true;
  std::optional<ProcessResult> result_;
  std::filesystem::path dir_;
  std::chrono::steady_clock::time_point started_;
};

/// Starts `argv` (see spawn_raw for PATH lookup and environment) with output
/// captured. Throws std::runtime_error if it cannot be executed.
Child spawn(const std::vector<std::string>& argv,
            const std::map<std::string, std::string>& extra_env = {});

/// Runs `argv` to completion, SIGKILLing it if it runs longer than `timeout`.
ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::map<std::string, std::string>& extra_env = {});

}  // namespace lockon::test
