// workers/redlock_worker.cpp — worker sub-commands for the Redlock tests
// (tests/integration/test_redlock*.cpp).
//
//   redlock_increment URLS COUNTER LOCK N LIST RETRY_MAX_MS START_NS
//       Waits until steady-clock START_NS (CLOCK_MONOTONIC ns, so that all
//       processes compete from the same instant). URLS is a comma-separated list of node URLs. N critical sections under
//       a fenced Redlock on LOCK, each a non-atomic GET + SET of COUNTER on
//       the first node (racy without the lock) and an RPUSH of the fence to
//       LIST. Prints "done N contended K" (K: sections whose first try_lock
//       found the lock held).
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/redlock.hpp"
#include "support/worker_registry.hpp"

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string::size_type begin = 0;
  while (true) {
    const auto end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

}  // namespace

LOCKON_WORKER_COMMAND(redlock_increment)(const std::vector<std::string>& args) -> int {
  if (args.size() != 7) {
    std::cerr << "usage: redlock_increment URLS COUNTER LOCK N LIST RETRY_MAX_MS START_NS\n";
    return 2;
  }
  const std::vector<std::string> urls = split(args[0], ',');
  const lockon::Client data(urls.front());
  lockon::RedlockOptions options;
  options.retry_delay_min = std::chrono::milliseconds(1);
  options.retry_delay_max = std::chrono::milliseconds(std::stoll(args[5]));
  lockon::Redlock lock(urls, args[2], {.ttl = std::chrono::seconds(10), .fencing = true}, options);
  const long long n = std::stoll(args[3]);
  std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::nanoseconds(std::stoll(args[6])))));
  long long contended = 0;
  for (long long i = 0; i < n; ++i) {
    if (!lock.try_lock()) {
      ++contended;
      if (!lock.try_lock_for(std::chrono::seconds(30))) {
        std::cout << "timeout" << std::endl;
        return 1;
      }
    }
    const lockon::Reply value = data.command({"GET", args[1]});
    const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
    data.command({"SET", args[1], std::to_string(next)});
    data.command({"RPUSH", args[4], std::to_string(lock.fence())});
    lock.release();
    // Work outside the lock: gives the waiters (polling every 1–RETRY_MAX_MS)
    // a chance, so that sections really interleave across processes.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::cout << "done " << n << " contended " << contended << std::endl;
  return 0;
}
