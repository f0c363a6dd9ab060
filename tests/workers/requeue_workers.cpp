// workers/requeue_workers.cpp — worker for test_lock_requeue.cpp.
//
//   contend_log URL LOCK LIST NAME START_NS STOP_NS
//       Waits until steady-clock START_NS, then until STOP_NS takes LOCK and,
//       while holding it, RPUSHes NAME to LIST (the global order of holders).
//       Prints "count <sections>".
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(contend_log)(const std::vector<std::string>& args) -> int {
  using Clock = std::chrono::steady_clock;
  if (args.size() != 6) {
    std::cerr << "usage: contend_log URL LOCK LIST NAME START_NS STOP_NS\n";
    return 2;
  }
  const auto at = [](const std::string& ns) {
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(std::stoll(ns))));
  };
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  client.ping();
  data.ping();
  lockon::Lock lock(client, args[1], {.ttl = std::chrono::seconds(10)});
  std::this_thread::sleep_until(at(args[4]));
  const auto stop = at(args[5]);
  long long count = 0;
  while (Clock::now() < stop) {
    const lockon::LockGuard guard(lock, std::chrono::seconds(20));
    data.command({"RPUSH", args[2], args[3]});
    ++count;
  }
  std::cout << "count " << count << std::endl;
  return 0;
}
