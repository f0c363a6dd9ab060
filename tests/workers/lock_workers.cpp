// workers/lock_workers.cpp — worker sub-commands for the single-instance lock
// tests (tests/integration/test_lock_*.cpp). Each runs in its own process so
// that mutual exclusion, fencing and crashed holders are exercised across
// processes, not just threads.
//
//   increment URL COUNTER LOCK N
//       N critical sections, each a non-atomic GET + SET of COUNTER under LOCK.
//       Prints "done N".
//   contend URL COUNTER LOCK START_NS STOP_NS
//       Waits until steady-clock START_NS, then does critical sections as
//       above until STOP_NS. Prints "count <sections>".
//   hold URL LOCK TTL_MS
//       Acquires LOCK (ttl TTL_MS, auto-renewed), prints "acquired", then
//       sleeps until SIGKILLed (gives up after 60 s with exit 1).
//   wait_acquire URL LOCK TIMEOUT_MS
//       try_lock_for(TIMEOUT_MS); prints "acquired <steady-ns>" (the moment
//       it returned) or "timeout", releases and exits 0.
//   wait_acquire_threads URL LOCK TTL_MS THREADS TIMEOUT_MS [clients]
//       THREADS threads of this process (one Client, or one each with
//       "clients") each try_lock_for(TIMEOUT_MS) with a TTL_MS lease,
//       releasing at once; prints "ready" when they started.
//   wait_hold_threads URL LOCK TTL_MS THREADS [norecord]
//       THREADS threads of this process each wait for LOCK (TTL_MS lease,
//       auto-renewed); the one that gets it prints "acquired" and holds it
//       until SIGKILLed (gives up after 60 s); the others stay queued.
//       "norecord": LockOptions::holder_record = false.
//   wait_extend_threads URL LOCK TTL_MS THREADS EXTEND_MS
//       As wait_hold_threads, without auto-renewal: the one that gets LOCK
//       extends it once by EXTEND_MS, then prints "acquired" and holds it.
//   hold_and_wait_two_clients URL LOCK TTL_MS
//       One thread takes LOCK through one Client (TTL_MS lease, renewed)
//       and prints "acquired"; then another thread of this process waits for
//       it through a second Client (its own subscriber). Holds until
//       SIGKILLed (gives up after 60 s).
//   fence URL LOCK N LIST
//       N fenced acquisitions; while holding, RPUSHes the fence to LIST.
//       Prints "fences <first> <last>".
//
// Steady-clock times are CLOCK_MONOTONIC nanoseconds, comparable across the
// processes of one machine.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"
#include "thread_clients.hpp"

namespace {

using Clock = std::chrono::steady_clock;

long long to_number(const std::string& text) { return std::stoll(text); }

Clock::time_point from_ns(const std::string& text) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(to_number(text))));
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int usage(const char* text) {
  std::cerr << "usage: " << text << '\n';
  return 2;
}

// One critical section: read, compute, write back — racy without the lock.
void increment(const lockon::Client& data, const std::string& counter) {
  const lockon::Reply value = data.command({"GET", counter});
  const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
  data.command({"SET", counter, std::to_string(next)});
}

}  // namespace

LOCKON_WORKER_COMMAND(increment)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return usage("increment URL COUNTER LOCK N");
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  lockon::Lock lock(client, args[2], {.ttl = std::chrono::seconds(10)});
  const long long n = to_number(args[3]);
  for (long long i = 0; i < n; ++i) {
    const lockon::LockGuard guard(lock, std::chrono::seconds(20));
    increment(data, args[1]);
  }
  std::cout << "done " << n << std::endl;
  return 0;
}

LOCKON_WORKER_COMMAND(contend)(const std::vector<std::string>& args) -> int {
  if (args.size() != 5) return usage("contend URL COUNTER LOCK START_NS STOP_NS");
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  client.ping();
  lockon::Lock lock(client, args[2], {.ttl = std::chrono::seconds(10)});
  const auto start = from_ns(args[3]);
  const auto stop = from_ns(args[4]);
  std::this_thread::sleep_until(start);
  long long count = 0;
  while (Clock::now() < stop) {
    const lockon::LockGuard guard(lock, std::chrono::seconds(20));
    increment(data, args[1]);
    ++count;
  }
  std::cout << "count " << count << std::endl;
  return 0;
}

LOCKON_WORKER_COMMAND(hold)(const std::vector<std::string>& args) -> int {
  if (args.size() != 3) return usage("hold URL LOCK TTL_MS");
  const lockon::Client client(args[0]);
  lockon::Lock lock(client, args[1], {.ttl = std::chrono::milliseconds(to_number(args[2]))});
  if (!lock.try_lock_for(std::chrono::seconds(10))) {
    std::cout << "busy" << std::endl;
    return 1;
  }
  std::cout << "acquired" << std::endl;
  // Bounded "forever": the test SIGKILLs us long before this ends.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 1;
}

LOCKON_WORKER_COMMAND(wait_acquire)(const std::vector<std::string>& args) -> int {
  if (args.size() != 3) return usage("wait_acquire URL LOCK TIMEOUT_MS");
  const lockon::Client client(args[0]);
  client.ping();
  lockon::Lock lock(client, args[1], {.ttl = std::chrono::seconds(10)});
  std::cout << "ready" << std::endl;
  const bool acquired = lock.try_lock_for(std::chrono::milliseconds(to_number(args[2])));
  const long long at = now_ns();
  if (!acquired) {
    std::cout << "timeout" << std::endl;
    return 0;
  }
  std::cout << "acquired " << at << std::endl;
  lock.release();
  return 0;
}

// THREADS (args[3]) threads of one process (one Client, one subscriber;
// or one Client each with `own_clients`) each wait up to `timeout` for LOCK
// (args[1]) with a TTL_MS (args[2]) lease and run `holding(lock)` if they
// got it: a process with several waiters queued on a key. Prints "ready"
// once they started.
namespace {

template <class Holding>
void wait_in_threads(const std::vector<std::string>& args, std::chrono::milliseconds timeout, Holding holding,
                     bool auto_renew = true, bool holder_record = true, bool own_clients = false) {
  const auto count = static_cast<std::size_t>(to_number(args[3]));
  const lockon::test::worker::ThreadClients clients(args[0], count, own_clients);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      lockon::Lock lock(clients.of(t), args[1],
                        {.ttl = std::chrono::milliseconds(to_number(args[2])), .auto_renew = auto_renew,
                         .holder_record = holder_record});
      if (lock.try_lock_for(timeout)) holding(lock);
    });
  }
  std::cout << "ready" << std::endl;
  for (auto& thread : threads) thread.join();
}

}  // namespace

LOCKON_WORKER_COMMAND(wait_acquire_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 5 && !(args.size() == 6 && args[5] == "clients"))
    return usage("wait_acquire_threads URL LOCK TTL_MS THREADS TIMEOUT_MS [clients]");
  wait_in_threads(
      args, std::chrono::milliseconds(to_number(args[4])), [](lockon::Lock& lock) { lock.unlock(); }, true, true,
      args.size() == 6);
  return 0;
}

// A process that holds LOCK (got by hand-over when another holds it now)
// while more of its threads wait behind it.
LOCKON_WORKER_COMMAND(wait_hold_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4 && !(args.size() == 5 && args[4] == "norecord"))
    return usage("wait_hold_threads URL LOCK TTL_MS THREADS [norecord]");
  wait_in_threads(
      args, std::chrono::seconds(60),
      [](lockon::Lock& lock) {
        std::cout << "acquired" << std::endl;
        // Bounded "forever": the test SIGKILLs us long before this ends.
        std::this_thread::sleep_for(std::chrono::seconds(60));
        lock.unlock();
      },
      true, args.size() == 4);
  return 1;
}

// The same holding a lease it extended by hand (no renewals).
LOCKON_WORKER_COMMAND(wait_extend_threads)(const std::vector<std::string>& args) -> int {
  if (args.size() != 5) return usage("wait_extend_threads URL LOCK TTL_MS THREADS EXTEND_MS");
  const auto extend_by = std::chrono::milliseconds(to_number(args[4]));
  wait_in_threads(
      args, std::chrono::seconds(60),
      [extend_by](lockon::Lock& lock) {
        lock.extend(extend_by);
        std::cout << "acquired" << std::endl;
        std::this_thread::sleep_for(std::chrono::seconds(60));  // SIGKILLed long before
        lock.unlock();
      },
      false);
  return 1;
}

// A process with two Clients on one server: a holder on one, a waiter
// queued behind it on the other (two subscriber ids, one process).
LOCKON_WORKER_COMMAND(hold_and_wait_two_clients)(const std::vector<std::string>& args) -> int {
  if (args.size() != 3) return usage("hold_and_wait_two_clients URL LOCK TTL_MS");
  const lockon::Client holding_client(args[0]);
  const lockon::Client waiting_client(args[0]);
  const lockon::LockOptions options{.ttl = std::chrono::milliseconds(to_number(args[2]))};
  lockon::Lock holder(holding_client, args[1], options);
  if (!holder.try_lock_for(std::chrono::seconds(10))) return 2;
  std::cout << "acquired" << std::endl;
  std::thread waiter([&] {
    lockon::Lock lock(waiting_client, args[1], options);
    if (lock.try_lock_for(std::chrono::seconds(60))) lock.unlock();
  });
  std::this_thread::sleep_for(std::chrono::seconds(60));  // SIGKILLed long before
  holder.unlock();
  waiter.join();
  return 1;
}

LOCKON_WORKER_COMMAND(fence)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) return usage("fence URL LOCK N LIST");
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  lockon::Lock lock(client, args[1], {.ttl = std::chrono::seconds(10), .fencing = true});
  const long long n = to_number(args[2]);
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  for (long long i = 0; i < n; ++i) {
    const lockon::LockGuard guard(lock, std::chrono::seconds(20));
    last = lock.fence();
    if (i == 0) first = last;
    data.command({"RPUSH", args[3], std::to_string(last)});
  }
  std::cout << "fences " << first << ' ' << last << std::endl;
  return 0;
}
