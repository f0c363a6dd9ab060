// Worker commands for the TLS tests (integration/test_tls.cpp):
//   ping_and_report URL
//       Makes a Client on URL and PINGs once. Prints "ok", or the error's
//       class and message ("TlsError: ..."), then "elapsed_ms=N" (from before
//       the Client was made to the outcome). Exits 0 either way. Run in its
//       own process so that anything OpenSSL writes to the terminal or to
//       stderr (or a read that never returns) is the test's to observe.
#include <chrono>
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
