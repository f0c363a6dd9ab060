// workers/echo.cpp — the smallest worker command, used to test the worker
// plumbing itself: prints its arguments separated by spaces, then a newline.
#include <iostream>

#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(echo)(const std::vector<std::string>& args) -> int {
  for (std::size_t i = 0; i < args.size(); ++i) std::cout << (i == 0 ? "" : " ") << args[i];
  std::cout << '\n';
  return 0;
}
