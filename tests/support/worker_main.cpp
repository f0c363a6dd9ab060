// support/worker_main.cpp — main() of lockon_test_worker: runs the sub-command
// named by argv[1] (see worker_registry.hpp).
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "support/worker_registry.hpp"

namespace {

int usage(const char* program, const std::string& problem) {
  std::cerr << program << ": " << problem << "\nusage: " << program
            << " <command> [args...]\nknown commands:";
  for (const auto& [name, command] : lockon::test::worker::registry()) std::cerr << ' ' << name;
  std::cerr << '\n';
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // stdout usually is a file the test polls: flush every line.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* program = argc > 0 ? argv[0] : "lockon_test_worker";
  if (argc < 2) return usage(program, "no command given");

  const std::string name = argv[1];
  const auto& commands = lockon::test::worker::registry();
  const auto found = commands.find(name);
  if (found == commands.end()) return usage(program, "unknown command '" + name + "'");

  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    return found->second(args);
  } catch (const std::exception& error) {
    std::cerr << program << " " << name << ": uncaught exception: " << error.what() << std::endl;
  } catch (...) {
    std::cerr << program << " " << name << ": uncaught non-standard exception" << std::endl;
  }
  return 3;
}
