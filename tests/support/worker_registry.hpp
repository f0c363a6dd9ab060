// support/worker_registry.hpp — named sub-commands of lockon_test_worker.
//
// A file in tests/workers/ registers a command with
//
//   #include "support/worker_registry.hpp"
//
//   LOCKON_WORKER_COMMAND(increment)(const std::vector<std::string>& args) -> int {
//     ...            // args are argv[2..]: everything after the command name
//     return 0;      // the process's exit status
//   }
//
// (the trailing `-> int` is required), and a test runs it with
// run_process(worker_argv("increment", {...}), timeout) from fixtures.hpp.
//
// Conventions kept by lockon_test_worker's main(): stdout is line-buffered
// (a test waiting for "acquired" sees each line as soon as it is written),
// exit 2 means a bad command line, exit 3 an uncaught exception.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace lockon::test::worker {

using Command = int (*)(const std::vector<std::string>& args);

/// name -> command; a function-local static so registration during static
/// initialisation of any translation unit is safe.
inline std::map<std::string, Command>& registry() {
  static std::map<std::string, Command> commands;
  return commands;
}

struct Registrar {
  Registrar(const char* name, Command command) {
    if (!registry().emplace(name, command).second) {
      std::fprintf(stderr, "lockon_test_worker: command '%s' is registered twice\n", name);
      std::_Exit(2);
    }
  }
};

}  // namespace lockon::test::worker

#define LOCKON_WORKER_COMMAND(name)                                                        \
  static auto lockon_worker_command_##name(const std::vector<std::string>& args)->int;     \
  static const ::lockon::test::worker::Registrar lockon_worker_registrar_##name{           \
      #name, &lockon_worker_command_##name};                                               \
  static auto lockon_worker_command_##name
