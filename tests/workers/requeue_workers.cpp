// workers/requeue_workers.cpp — worker for test_lock_requeue.cpp.
//
//   contend_log URL LOCK LIST NAME READY WORKERS DURATION_MS
//       INCRs READY and waits (at most 20 s) until WORKERS workers did, so
//       that all start together however slowly each process started (under
//       ASan and a loaded machine a fixed start time was not enough: one
//       worker ran alone for dozens of sections). Then for DURATION_MS takes
//       LOCK and, while holding it, RPUSHes NAME to LIST (the global order of
//       holders). Prints "count <sections>".
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(contend_log)(const std::vector<std::string>& args) -> int {
  using Clock = std::chrono::steady_clock;
  if (args.size() != 7) {
    std::cerr << "usage: contend_log URL LOCK LIST NAME READY WORKERS DURATION_MS\n";
    return 2;
  }
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  client.ping();
  data.ping();
  lockon::Lock lock(client, args[1], {.ttl = std::chrono::seconds(10)});
  data.command({"INCR", args[4]});
  const long long workers = std::stoll(args[5]);
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  while (data.command({"INCRBY", args[4], "0"}).as_integer() < workers) {
    if (Clock::now() > give_up) {
      std::cerr << "contend_log: the other workers did not start within 20 s\n";
      return 3;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const auto stop = Clock::now() + std::chrono::milliseconds(std::stoll(args[6]));
  long long count = 0;
  while (Clock::now() < stop) {
    const lockon::LockGuard guard(lock, std::chrono::seconds(20));
    data.command({"RPUSH", args[2], args[3]});
    ++count;
  }
  std::cout << "count " << count << std::endl;
  return 0;
}
