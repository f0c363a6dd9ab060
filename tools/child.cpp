#include "child.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

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

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &reset_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  pid_t pid = -1;
  // glibc reports a failed exec (ENOENT, EACCES, ENOEXEC...) as the result.
  const int rc = ::posix_spawnp(&pid, args.front(), nullptr, &attr, args.data(), env.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    error = rc;
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
