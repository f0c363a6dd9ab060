// workers/lock_on_workers.cpp — worker sub-commands for the lock_on tests
// (tests/integration/test_lock_on*.cpp).
//
//   lock_on_entities URL PREFIX THREADS ITERATIONS ENTITIES START_NS
//       THREADS threads each make ITERATIONS calls of a function locked on
//       its entity argument (lock_on<0>, key prefix PREFIX); thread t's call
//       i works on entity (t + i) % ENTITIES. The critical section is a
//       non-atomic GET + SET of PREFIX:counter:<entity> plus a short sleep.
//       Threads start at steady-clock START_NS. Prints one line per call,
//       "interval <entity> <start_ns> <end_ns>" (times taken inside the
//       critical section), then "done <calls>".
//
// Steady-clock times are CLOCK_MONOTONIC nanoseconds, comparable across the
// processes of one machine.
#include <chrono>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/worker_registry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

struct Interval {
  int entity;
  long long start_ns;
  long long end_ns;
};

}  // namespace

LOCKON_WORKER_COMMAND(lock_on_entities)(const std::vector<std::string>& args) -> int {
  if (args.size() != 6) {
    std::cerr << "usage: lock_on_entities URL PREFIX THREADS ITERATIONS ENTITIES START_NS\n";
    return 2;
  }
  const std::string& url = args[0];
  const std::string& prefix = args[1];
  const int threads = std::stoi(args[2]);
  const int iterations = std::stoi(args[3]);
  const int entities = std::stoi(args[4]);
  const Clock::time_point start(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(std::stoll(args[5]))));

  const lockon::Client data(url, {.size = static_cast<std::size_t>(threads) + 2});
  const lockon::RedisLocker locker(
      lockon::Client(url, {.size = static_cast<std::size_t>(threads) + 2}),
      {.max_retry = 0, .retry_delay = std::chrono::seconds(2), .timeout = std::chrono::seconds(60), .key_prefix = prefix});
  data.ping();

  std::mutex mutex;
  std::vector<Interval> intervals;
  const auto bump = locker.lock_on<0>("test::bump", [&](int entity) {
    const long long entered = now_ns();
    const std::string counter = prefix + ":counter:" + std::to_string(entity);
    const lockon::Reply value = data.command({"GET", counter});
    const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // widen the race window
    data.command({"SET", counter, std::to_string(next)});
    const long long left = now_ns();
    const std::lock_guard guard(mutex);
    intervals.push_back({entity, entered, left});
  });

  std::vector<std::thread> pool;
  std::mutex error_mutex;
  std::string first_error;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::this_thread::sleep_until(start);
      try {
        for (int i = 0; i < iterations; ++i) bump((t + i) % entities);
      } catch (const std::exception& e) {
        const std::lock_guard guard(error_mutex);
        if (first_error.empty()) first_error = e.what();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  if (!first_error.empty()) {
    std::cerr << "error: " << first_error << '\n';
    return 1;
  }
  std::ostringstream out;
  for (const Interval& interval : intervals)
    out << "interval " << interval.entity << ' ' << interval.start_ns << ' ' << interval.end_ns << '\n';
  out << "done " << intervals.size() << '\n';
  std::cout << out.str() << std::flush;
  return 0;
}
