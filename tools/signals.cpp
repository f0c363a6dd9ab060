#include "signals.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace lockon::cli {
namespace {

constexpr std::array<int, 4> kForwarded{SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Written by the handler (which only ever runs on the main thread, inside
// ppoll), read by the main thread. Lock-free atomics are async-signal-safe.
std::array<std::atomic<int>, NSIG> g_received{};
std::array<std::atomic<int>, NSIG> g_forward{};

void record(int signal, siginfo_t* info, void*) {
  if (signal <= 0 || signal >= NSIG) return;
  // The terminal driver sends its signals with si_code SI_KERNEL to the whole
  // foreground process group; anything else (kill, sigqueue...) was aimed at us.
  const bool from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  if (!from_terminal) g_forward[static_cast<std::size_t>(signal)].store(1);
  g_received[static_cast<std::size_t>(signal)].store(1);
}

}  // namespace

Wakeup::Wakeup() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

Wakeup::~Wakeup() {
  ::close(read_fd_);
  ::close(write_fd_);
}

void Wakeup::notify() noexcept {
  const char byte = 1;
  // A full pipe already guarantees a wake-up: EAGAIN is fine.
  [[maybe_unused]] const ssize_t n = ::write(write_fd_, &byte, 1);
}

void Wakeup::drain() noexcept {
  char buffer[64];
  while (::read(read_fd_, buffer, sizeof buffer) > 0) {
  }
}

SignalRelay::SignalRelay() {
  sigemptyset(&handled_);
  for (const int s : kForwarded) sigaddset(&handled_, s);
  sigaddset(&handled_, SIGCHLD);
  reset_in_child_ = handled_;
  sigaddset(&reset_in_child_, SIGPIPE);
  if (int e = pthread_sigmask(SIG_BLOCK, &handled_, &previous_mask_); e != 0)
    throw std::system_error(e, std::generic_category(), "pthread_sigmask");

  struct sigaction action {};
  action.sa_sigaction = &record;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigfillset(&action.sa_mask);
  for (const int s : kForwarded) {
    g_received[static_cast<std::size_t>(s)].store(0);
    g_forward[static_cast<std::size_t>(s)].store(0);
    struct sigaction old {};
    ::sigaction(s, &action, &old);
    previous_actions_.emplace_back(s, old);
  }
  struct sigaction child_action = action;
  child_action.sa_flags |= SA_NOCLDSTOP;
  struct sigaction old {};
  ::sigaction(SIGCHLD, &child_action, &old);
  previous_actions_.emplace_back(SIGCHLD, old);

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);
  previous_actions_.emplace_back(SIGPIPE, old);
}

SignalRelay::~SignalRelay() {
  for (const auto& [s, old] : previous_actions_) ::sigaction(s, &old, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

void SignalRelay::wait(const Wakeup& wake, std::optional<std::chrono::milliseconds> timeout) const {
  pollfd fd{wake.fd(), POLLIN, 0};
  timespec limit{};
  if (timeout) {
    const long long ms = std::max<long long>(0, timeout->count());
    limit.tv_sec = static_cast<time_t>(ms / 1000);
    limit.tv_nsec = static_cast<long>((ms % 1000) * 1'000'000);
  }
  sigset_t during = previous_mask_;
  for (const int s : kForwarded) sigdelset(&during, s);
  sigdelset(&during, SIGCHLD);
  // EINTR is the point (a signal arrived); other errors are not actionable
  // here and the caller loops anyway.
  ::ppoll(&fd, 1, timeout ? &limit : nullptr, &during);
}

std::vector<SignalRelay::Received> SignalRelay::take() {
  std::vector<Received> out;
  for (const int s : kForwarded) {
    const auto i = static_cast<std::size_t>(s);
    if (g_received[i].exchange(0) != 0) out.push_back({s, g_forward[i].exchange(0) != 0});
  }
  return out;
}

void SignalRelay::die_by(int signal) {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(signal);
  std::_Exit(128 + signal);
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

}  // namespace lockon::cli
