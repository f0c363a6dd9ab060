// support/process.cpp — see process.hpp for why children are forked by a
// dedicated launcher thread.
#include "support/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

extern char** environ;

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::runtime_error errno_error(const std::string& what, int error_number) {
  return std::runtime_error(what + ": " + std::strerror(error_number));
}

/// Owns one file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Fd open_or_throw(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
  if (fd < 0) throw errno_error("cannot open " + path.string(), errno);
  return Fd(fd);
}

/// Everything the child needs, prepared before fork: after fork only
/// async-signal-safe calls are allowed (other threads may hold malloc's lock).
struct ExecPlan {
  std::string path;
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int error_pipe = -1;  // write end, O_CLOEXEC: closes by itself on exec
  pid_t parent_pid = -1;
  int max_fd = 1024;
};

[[noreturn]] void exec_child(const ExecPlan& plan) noexcept {
  // Die with the launcher thread, i.e. with the test process. If the parent
  // died between fork and prctl, nobody would send the signal: check.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.parent_pid) ::_exit(127);

  ::dup2(plan.stdin_fd, STDIN_FILENO);
  ::dup2(plan.stdout_fd, STDOUT_FILENO);
  ::dup2(plan.stderr_fd, STDERR_FILENO);

  sigset_t no_signals;
  ::sigemptyset(&no_signals);
  ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
  // An ignored disposition survives exec (a test ignoring SIGPIPE must not
  // change how a worker behaves).
  for (const int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2}) {
    ::signal(sig, SIG_DFL);
  }

  // No descriptor of the test process survives exec (the error pipe is
  // already close-on-exec and stays usable until then).
  if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < plan.max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }

  ::execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  const int exec_errno = errno;
  [[maybe_unused]] const auto written = ::write(plan.error_pipe, &exec_errno, sizeof exec_errno);
  ::_exit(127);
}

/// The one thread that forks. Leaked on purpose: it must outlive every static
/// destructor (a static RedisServer is stopped during static destruction).
class Launcher {
 public:
  static Launcher& instance() {
    static Launcher* const launcher = new Launcher;
    return *launcher;
  }

  pid_t fork_exec(const ExecPlan& plan) {
    Job job{&plan};
    std::unique_lock lock(mutex_);
    queue_.push_back(&job);
    changed_.notify_all();
    changed_.wait(lock, [&] { return job.done; });
    if (job.pid < 0) throw errno_error("fork failed", job.fork_errno);
    return job.pid;
  }

 private:
  struct Job {
    const ExecPlan* plan;
    pid_t pid = -1;
    int fork_errno = 0;
    bool done = false;
  };

  Launcher() { std::thread([this] { run(); }).detach(); }

  [[noreturn]] void run() {
    // Signals meant for the process are handled by the test's own threads.
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty(); });
      Job* job = queue_.front();
      queue_.pop_front();
      lock.unlock();

      const pid_t pid = ::fork();
      if (pid == 0) exec_child(*job->plan);
      const int fork_errno = errno;

      lock.lock();
      job->pid = pid;
      job->fork_errno = fork_errno;
      job->done = true;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job*> queue_;
};

std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path_env = std::getenv("PATH");
  std::istringstream dirs(path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw std::runtime_error("cannot execute '" + name + "': not found in PATH");
}

std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra_env) {
  std::map<std::string, std::string> merged;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (equals == std::string_view::npos) continue;
    merged.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  for (const auto& [name, value] : extra_env) merged[name] = value;
  std::vector<std::string> result;
  result.reserve(merged.size());
  for (const auto& [name, value] : merged) result.push_back(name + "=" + value);
  return result;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

std::string describe_status(const ProcessResult& r) {
  std::ostringstream text;
  if (r.signal != 0) {
    text << "killed by signal " << r.signal << " (" << ::strsignal(r.signal) << ")";
  } else {
    text << "exit " << r.exit_code;
  }
  if (r.timed_out) text << " (timed out, killed by the harness)";
  text << " after " << r.elapsed.count() << " ms";
  return text.str();
}

}  // namespace

std::string ProcessResult::describe() const {
  return describe_status(*this) + "\n--- stdout ---\n" + out + "\n--- stderr ---\n" + err;
}

pid_t spawn_raw(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& extra_env, int stdout_fd,
                int stderr_fd) {
  if (argv.empty()) throw std::invalid_argument("spawn: empty argv");
  ExecPlan plan;
  plan.path = resolve_program(argv.front());
  plan.argv_storage = argv;
  plan.env_storage = child_environment(extra_env);
  plan.argv = pointers_to(plan.argv_storage);
  plan.envp = pointers_to(plan.env_storage);

  const Fd dev_null = open_or_throw("/dev/null", O_RDONLY);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw errno_error("pipe2", errno);
  const Fd error_read(pipe_fds[0]);
  Fd error_write(pipe_fds[1]);

  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 65536));
  }
  plan.stdin_fd = dev_null.get();
  plan.stdout_fd = stdout_fd;
  plan.stderr_fd = stderr_fd;
  plan.error_pipe = error_write.get();
  plan.parent_pid = ::getpid();

  const pid_t pid = Launcher::instance().fork_exec(plan);
  error_write.reset();  // now only the child holds the write end

  // EOF: exec succeeded (close-on-exec). An int: exec failed with that errno.
  // Bounded in case a test's own fork() child inherited the write end.
  pollfd readable{error_read.get(), POLLIN, 0};
  int exec_errno = 0;
  if (::poll(&readable, 1, 5000) > 0) {
    if (::read(error_read.get(), &exec_errno, sizeof exec_errno) !=
        static_cast<ssize_t>(sizeof exec_errno)) {
      exec_errno = 0;
    }
  }
  if (exec_errno != 0) {
    wait_for_exit(pid, 5s);
    throw errno_error("cannot execute '" + plan.path + "'", exec_errno);
  }
  return pid;
}

std::optional<int> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = 1ms;
  for (;;) {
    int status = 0;
    const pid_t reaped = ::waitpid(pid, &status, WNOHANG);
    if (reaped == pid) return status;
    if (reaped < 0 && errno == EINTR) continue;
    if (reaped < 0) return 0;  // ECHILD: somebody else reaped it
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(10));
  }
}

std::filesystem::path make_temp_dir(std::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" +
                        std::string(prefix) + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw errno_error("mkdtemp " + pattern, errno);
  }
  return pattern;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// ---------------------------------------------------------------- Child

Child::Child(pid_t pid, std::filesystem::path dir)
    : pid_(pid), reaped_(false), dir_(std::move(dir)), started_(Clock::now()) {}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      reaped_(std::exchange(other.reaped_, true)),
      result_(std::move(other.result_)),
      dir_(std::exchange(other.dir_, {})),
      started_(other.started_) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    release();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = std::exchange(other.reaped_, true);
    result_ = std::move(other.result_);
    dir_ = std::exchange(other.dir_, {});
    started_ = other.started_;
  }
  return *this;
}

Child::~Child() { release(); }

void Child::release() noexcept {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait_for_exit(pid_, 5s);
    reaped_ = true;
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

ProcessResult Child::result_from_status(int status, bool timed_out) const {
  ProcessResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.timed_out = timed_out;
  result.out = stdout_text();
  result.err = stderr_text();
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_);
  return result;
}

bool Child::running() { return !try_wait(0ms).has_value(); }

void Child::kill(int sig) {
  if (!reaped_ && pid_ > 0) ::kill(pid_, sig);
}

std::optional<ProcessResult> Child::try_wait(std::chrono::milliseconds timeout) {
  if (reaped_) return result_.value_or(ProcessResult{});
  const auto status = wait_for_exit(pid_, timeout);
  if (!status) return std::nullopt;
  reaped_ = true;
  result_ = result_from_status(*status, false);
  return result_;
}

ProcessResult Child::wait(std::chrono::milliseconds timeout) {
  if (auto finished = try_wait(timeout)) return *finished;
  ::kill(pid_, SIGKILL);
  const auto status = wait_for_exit(pid_, 5s);
  if (!status) {
    throw std::runtime_error("child " + std::to_string(pid_) + " survived SIGKILL for 5 s");
  }
  reaped_ = true;
  result_ = result_from_status(*status, true);
  return *result_;
}

std::string Child::stdout_text() const { return dir_.empty() ? "" : read_file(dir_ / "stdout"); }
std::string Child::stderr_text() const { return dir_.empty() ? "" : read_file(dir_ / "stderr"); }

bool Child::wait_for_output(std::string_view needle, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (stdout_text().find(needle) != std::string::npos) return true;
    // Re-read after noticing the exit: the last write may have raced it.
    if (!running()) return stdout_text().find(needle) != std::string::npos;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
}

Child spawn(const std::vector<std::string>& argv,
            const std::map<std::string, std::string>& extra_env) {
  auto dir = make_temp_dir("lockon-child");
  try {
    const Fd out = open_or_throw(dir / "stdout", O_WRONLY | O_CREAT | O_TRUNC);
    const Fd err = open_or_throw(dir / "stderr", O_WRONLY | O_CREAT | O_TRUNC);
    const pid_t pid = spawn_raw(argv, extra_env, out.get(), err.get());
    return Child(pid, std::move(dir));
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    throw;
  }
}

ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::map<std::string, std::string>& extra_env) {
  return spawn(argv, extra_env).wait(timeout);
}

}  // namespace lockon::test
