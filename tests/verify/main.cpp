// verify/main.cpp — lockon_verify: the fenced-history checker and nemesis
// (docs/verification.md). Modes: verify.hpp.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <exception>
#include <string>

#include "verify.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lockon_verify run|check|worker [--option value]...\n");
    return 2;
  }
  const std::string mode = argv[1];
  try {
    const lockon::verify::Args args(argc, argv, 2);
    if (mode == "worker") return lockon::verify::run_worker(args);
    if (mode == "check") return lockon::verify::run_check(args);
    if (mode == "run") {
      char self[PATH_MAX] = {};
      const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
      return lockon::verify::run_orchestrator(args, n > 0 ? std::string(self, static_cast<std::size_t>(n)) : argv[0]);
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockon_verify %s: %s\n", mode.c_str(), e.what());
    return 3;
  }
}
