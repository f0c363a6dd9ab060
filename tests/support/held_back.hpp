// support/held_back.hpp — how long a loaded machine held a timed child
// process back: the time it, this process's threads and a server it talks to
// spent runnable without a CPU (Linux schedstat). A test that bounds a
// child's wall time (a CLI's start-up and one request within 1 s) tells a
// bound missed because the machine was busy (set the run up again) from one
// the child missed by itself (fail): the latter still misses it once the
// waits for a CPU are taken out.
//
// Header-only, Linux only (/proc/<pid>/schedstat: "<on cpu ns> <waiting on a
// run queue ns> <timeslices>"); without schedstat the hold-back is unknown
// and no miss is put down to the machine.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "support/process.hpp"

namespace lockon::test {

/// Nanoseconds the task at `proc_dir` (/proc/<pid> or /proc/<pid>/task/<tid>)
/// has waited on a run queue so far; -1 if unknown.
inline long long run_queue_wait_ns(const std::filesystem::path& proc_dir) {
  std::ifstream in(proc_dir / "schedstat");
  long long on_cpu = 0;
  long long waiting = -1;
  if (!(in >> on_cpu >> waiting)) return -1;
  return waiting;
}

/// The run-queue waits of every thread of process `pid` (0: this one), by thread id.
inline std::map<std::string, long long> thread_run_queue_waits(pid_t pid) {
  std::map<std::string, long long> waits;
  const std::filesystem::path tasks =
      std::filesystem::path("/proc") / (pid == 0 ? std::string("self") : std::to_string(pid)) / "task";
  std::error_code error;
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const long long ns = run_queue_wait_ns(task.path());
    if (ns >= 0) waits[task.path().filename().string()] = ns;
  }
  return waits;
}

/// How much longer the threads in `later` waited than in `earlier` (a thread
/// new in `later` counts whole; one that ended is lost).
inline long long added_wait_ns(const std::map<std::string, long long>& earlier,
                               const std::map<std::string, long long>& later) {
  long long added = 0;
  for (const auto& [tid, ns] : later) {
    const auto before = earlier.find(tid);
    added += before == earlier.end() ? ns : ns - before->second;
  }
  return added;
}

/// A child run to its end and timed like `start = now; run_process(...);
/// ms_since(start)`.
struct HeldBackRun {
  ProcessResult result;
  long long elapsed_ms = 0;
  /// Of that, the time the machine held it back: the child's main thread,
  /// this process's threads and those of `servers` waiting for a CPU
  /// (overlapping waits add up). -1: unknown (no schedstat).
  long long held_back_ms = -1;

  /// It took longer than `most_ms` only because the machine was busy: its
  /// waits for a CPU taken out, it would have taken `most_ms` or less.
  bool over_only_by_load(long long most_ms) const {
    return elapsed_ms > most_ms && held_back_ms >= 0 && elapsed_ms - held_back_ms <= most_ms;
  }
  std::string timing() const {
    return std::to_string(elapsed_ms) + " ms, of which the machine held it back " +
           (held_back_ms < 0 ? std::string("(unknown)") : std::to_string(held_back_ms) + " ms");
  }
};

/// Runs `argv` to completion (SIGKILLed after `timeout`, like run_process),
/// measuring how long the machine held it back. `servers`: processes it
/// talks to (e.g. the redis-server), whose waits for a CPU count too.
inline HeldBackRun run_measuring_hold_back(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                           const std::vector<pid_t>& servers = {},
                                           const std::map<std::string, std::string>& extra_env = {}) {
  HeldBackRun run;
  std::vector<std::map<std::string, long long>> before;
  before.push_back(thread_run_queue_waits(0));
  for (const pid_t server : servers) before.push_back(thread_run_queue_waits(server));
  const auto start = std::chrono::steady_clock::now();
  Child child = spawn(argv, extra_env);
  // Until it has exited, without reaping it (WNOWAIT): a zombie's schedstat
  // is still there to read. Bounded by `timeout`, then child.wait() kills it.
  const auto deadline = start + timeout;
  bool exited = false;
  while (!exited && std::chrono::steady_clock::now() < deadline) {
    siginfo_t info{};
    const int rc = ::waitid(P_PID, static_cast<id_t>(child.pid()), &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == child.pid()) exited = true;
    else if (rc != 0 && errno != EINTR) break;  // not waitable here: leave it to child.wait()
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const long long child_ns = exited ? run_queue_wait_ns("/proc/" + std::to_string(child.pid())) : -1;
  long long ours_ns = added_wait_ns(before[0], thread_run_queue_waits(0));
  for (std::size_t i = 0; i < servers.size(); ++i)
    ours_ns += added_wait_ns(before[i + 1], thread_run_queue_waits(servers[i]));
  run.result = child.wait(std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                       deadline - std::chrono::steady_clock::now())));
  run.elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  if (child_ns >= 0) run.held_back_ms = (child_ns + ours_ns) / 1'000'000;
  return run;
}

}  // namespace lockon::test
