#include "child.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "exit_codes.hpp"
#include "signals.hpp"

extern char** environ;

namespace lockon::cli {
namespace {

std::vector<int> g_inherited;

std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    fds.push_back(static_cast<int>(fd));
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

// Everything opened since start-up (hiredis sockets, our pipes, OpenSSL's
// random device...) is closed on exec. lockon execs nothing else, so
// flagging the parent's descriptors costs nothing. A connection a library
// thread opens at this very moment could still slip through; it would only
// be an extra open socket in COMMAND.
void hide_own_fds() {
  for (const int fd : open_fds()) {
    if (fd <= STDERR_FILENO || std::binary_search(g_inherited.begin(), g_inherited.end(), fd)) continue;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
}

}  // namespace

void remember_inherited_fds() { g_inherited = open_fds(); }

namespace {

// Where execvp would look for argv[0], computed before fork(): the child of a
// multi-threaded process may only call async-signal-safe functions (execve,
// not a PATH search that may allocate).
std::vector<std::string> exec_candidates(const std::string& program) {
  if (program.find('/') != std::string::npos) return {program};
  const char* path = std::getenv("PATH");
  const std::string_view dirs = path != nullptr ? std::string_view(path) : std::string_view("/usr/local/bin:/usr/bin:/bin");
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string_view dir = dirs.substr(at, end - at);
    out.push_back((dir.empty() ? std::string(".") : std::string(dir)) + "/" + program);  // "" means the current directory
    at = end + 1;
  }
  return out;
}

// In the child, between fork() and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(int report_fd, pid_t parent, int death_signal, const sigset_t& reset_signals,
                             const std::vector<std::string>& candidates, char* const* args, char* const* env) {
  for (int signal = 1; signal < NSIG; ++signal)
    if (sigismember(&reset_signals, signal) == 1) ::signal(signal, SIG_DFL);
  // COMMAND must not outlive lockon: it would run unprotected once the
  // lease lapses. The death signal is armed first, then the parent checked:
  // if lockon died in between, the signal will never come.
  int error = 0;
  if (::prctl(PR_SET_PDEATHSIG, death_signal) != 0) error = errno;
  if (error == 0 && ::getppid() != parent) ::_exit(exit_code::internal);
  if (error == 0) {
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    bool denied = false;
    for (const auto& candidate : candidates) {
      ::execve(candidate.c_str(), args, env);
      error = errno;
      if (error == EACCES) denied = true;
      if (error != ENOENT && error != ENOTDIR && error != EACCES) break;  // as execvp: a real failure stops the search
    }
    if (denied && (error == ENOENT || error == ENOTDIR)) error = EACCES;
  }
  ssize_t ignored = ::write(report_fd, &error, sizeof error);
  static_cast<void>(ignored);
  ::_exit(exit_code::not_found);
}

}  // namespace

pid_t spawn_command(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                    const sigset_t& reset_signals, int& error) {
  error = 0;
  hide_own_fds();

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  std::vector<char*> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(extra_env.begin(), extra_env.end(), [&](const std::string& extra) {
      const auto name_end = extra.find('=') + 1;  // "NAME="
      return entry.substr(0, name_end) == std::string_view(extra).substr(0, name_end);
    });
    if (!replaced) env.push_back(*e);
  }
  for (const auto& extra : extra_env) env.push_back(const_cast<char*>(extra.c_str()));
  env.push_back(nullptr);
  const std::vector<std::string> candidates = exec_candidates(argv.front());

  // The child reports a failed exec through this pipe; a successful exec
  // closes it (O_CLOEXEC) and the parent reads end-of-file.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    error = errno;
    return -1;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    exec_child(report[1], parent, SIGKILL, reset_signals, candidates, args.data(), env.data());
  }
  ::close(report[1]);
  if (pid < 0) {
    error = errno;
    ::close(report[0]);
    return -1;
  }
  int child_error = 0;
  ssize_t n = 0;
  do {
    n = ::read(report[0], &child_error, sizeof child_error);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof child_error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    error = child_error != 0 ? child_error : ENOEXEC;
    return -1;
  }
  return pid;
}

int shell_status(int wait_status) noexcept {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return exit_code::signal_base + WTERMSIG(wait_status);
  return exit_code::internal;
}

std::string describe_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return "was killed by " + signal_name(WTERMSIG(wait_status));
  return "ended with wait status " + std::to_string(wait_status);
}

}  // namespace lockon::cli
