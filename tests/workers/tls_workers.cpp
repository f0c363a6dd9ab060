// Worker commands for the TLS tests (integration/test_tls.cpp):
//   ping_and_report URL
//       Makes a Client on URL and PINGs once. Prints "ok", or the error's
//       class and message ("TlsError: ..."), then "elapsed_ms=N" (from before
//       the Client was made to the outcome). Exits 0 either way. Run in its
//       own process so that anything OpenSSL writes to the terminal or to
//       stderr (or a read that never returns) is the test's to observe.
//   ping_on_a_terminal URL
//       The same PING in a child whose controlling terminal is a new
//       pseudo-terminal (its own session, the terminal as stdin, stdout and
//       stderr), as when a user runs a program from a shell: a prompt goes
//       to that terminal and a read from it waits for a line. This process
//       keeps the terminal's other end, answers nothing, and prints after 5 s
//       or when the child ends: "finished" or "blocked" (the child was still
//       running: it is killed), then "terminal: " and everything the child
//       wrote there (its outcome line included), on one line.
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/worker_registry.hpp"

namespace {

std::string class_of(const std::exception& e) {
  if (dynamic_cast<const lockon::TlsError*>(&e)) return "TlsError";
  if (dynamic_cast<const lockon::ConnectError*>(&e)) return "ConnectError";
  if (dynamic_cast<const lockon::AuthError*>(&e)) return "AuthError";
  if (dynamic_cast<const lockon::ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const lockon::Error*>(&e)) return "Error";
  return "std::exception";
}

}  // namespace

LOCKON_WORKER_COMMAND(ping_and_report)(const std::vector<std::string>& args) -> int {
  if (args.size() != 1) return 2;
  const auto started = std::chrono::steady_clock::now();
  try {
    const lockon::Client client(args[0]);
    client.ping();
    std::cout << "ok\n";
  } catch (const std::exception& error) {
    std::cout << class_of(error) << ": " << error.what() << "\n";
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  std::cout << "elapsed_ms=" << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << "\n";
  return 0;
}

LOCKON_WORKER_COMMAND(ping_on_a_terminal)(const std::vector<std::string>& args) -> int {
  if (args.size() != 1) return 2;
  const int terminal = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (terminal < 0 || ::grantpt(terminal) != 0 || ::unlockpt(terminal) != 0) return 4;
  const std::string terminal_name = ::ptsname(terminal);
  std::cout.flush();
  const pid_t child = ::fork();
  if (child < 0) return 4;
  if (child == 0) {
    // A new session, whose first terminal opened becomes its controlling one.
    ::setsid();
    const int user_side = ::open(terminal_name.c_str(), O_RDWR);
    if (user_side < 0 || ::ioctl(user_side, TIOCSCTTY, 0) != 0) std::_Exit(4);
    ::dup2(user_side, 0);
    ::dup2(user_side, 1);
    ::dup2(user_side, 2);
    if (user_side > 2) ::close(user_side);
    ::close(terminal);
    std::string outcome = "ok";
    try {
      const lockon::Client client(args[0]);
      client.ping();
    } catch (const std::exception& error) {
      outcome = class_of(error) + ": " + error.what();
    }
    std::printf("%s\n", outcome.c_str());
    std::fflush(stdout);
    std::_Exit(0);
  }
  std::string shown;
  bool finished = false;
  const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < give_up_at) {
    pollfd readable{terminal, POLLIN, 0};
    if (::poll(&readable, 1, 20) > 0) {
      char buffer[512];
      const ssize_t n = ::read(terminal, buffer, sizeof buffer);
      if (n > 0) shown.append(buffer, static_cast<std::size_t>(n));
    }
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      finished = true;
      break;
    }
  }
  if (finished) {
    // What it wrote just before it ended (EIO once nothing is left).
    char buffer[512];
    ssize_t n;
    while ((n = ::read(terminal, buffer, sizeof buffer)) > 0) shown.append(buffer, static_cast<std::size_t>(n));
  } else {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  for (char& c : shown)
    if (c == '\n' || c == '\r') c = ' ';
  std::cout << (finished ? "finished" : "blocked") << "\nterminal: " << shown << "\n";
  return 0;
}
