// workers/safety_workers.cpp — worker sub-commands for the fault tests in
// tests/integration/test_lock_safety.cpp.
//
//   wait_then_check URL LOCK TTL_MS TIMEOUT_MS
//       Prints "ready", then try_lock_for(TIMEOUT_MS) with a TTL_MS lease
//       (no auto-renewal). When it returns true, asks the server at once
//       whether the key still holds its token and prints
//       "acquired owned=<0|1>", then releases; else prints "timeout".
//       A test SIGSTOPs it while it waits: a hand-over whose lease ran out
//       while it was stopped must not be reported as an acquisition.
#include <chrono>
#include <iostream>
#include <string>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(wait_then_check)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) {
    std::cerr << "usage: wait_then_check URL LOCK TTL_MS TIMEOUT_MS\n";
    return 2;
  }
  const lockon::Client client(args[0]);
  client.ping();
  lockon::Lock lock(client, args[1],
                    {.ttl = std::chrono::milliseconds(std::stoll(args[2])), .auto_renew = false});
  std::cout << "ready" << std::endl;
  if (!lock.try_lock_for(std::chrono::milliseconds(std::stoll(args[3])))) {
    std::cout << "timeout" << std::endl;
    return 0;
  }
  const bool owned = lock.owned();
  std::cout << "acquired owned=" << (owned ? 1 : 0) << std::endl;
  lock.unlock();
  return 0;
}
