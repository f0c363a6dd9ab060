// workers/watchdog_workers.cpp — worker sub-commands for the watchdog fault
// tests (tests/integration/test_watchdog_faults.cpp). They run in their own
// process so that a watchdog that deadlocks, or a holder that is SIGSTOPped,
// cannot hang or freeze the test process.
//
//   cross_unlock URL PREFIX
//       Acquires PREFIX:c, then PREFIX:a and PREFIX:b (ttl 600 ms each,
//       auto-renewed) and prints "acquired". The test deletes a and b and
//       freezes the server so that both fall due in one renewal round. a's
//       on_lost unlocks b; a stop callback on b's lost_token unlocks a.
//       Prints "callbacks done" once both ran (exit 2 after 5 s without),
//       then holds c for 1.8 s more and exits 0 (3 if c was lost).
//   hold_paused URL LOCK TTL_MS
//       Acquires LOCK (ttl TTL_MS, auto-renewed), waits TTL_MS/2 (a renewal
//       happened), prints "holding", then polls the clock every millisecond.
//       The first iteration after a gap longer than TTL_MS (the test
//       SIGSTOPped and SIGCONTed it) checks lost() and prints
//       "first check lost=<0|1>" and exits 0. Exit 1 after 10 s without gap.
#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int usage(const char* text) {
  std::cerr << "usage: " << text << '\n';
  return 2;
}

// Bounded poll of a flag set by another thread.
bool await(const std::atomic<bool>& flag, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!flag.load()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

}  // namespace

LOCKON_WORKER_COMMAND(cross_unlock)(const std::vector<std::string>& args) -> int {
  if (args.size() != 2) return usage("cross_unlock URL PREFIX");
  const lockon::Client client(args[0]);
  const std::string prefix = args[1];
  std::atomic<bool> a_callback_done{false};
  std::atomic<bool> b_callback_done{false};
  std::optional<lockon::Lock> b;
  lockon::Lock c(client, prefix + ":c", {.ttl = 600ms});
  lockon::Lock a(client, prefix + ":a", {.ttl = 600ms, .on_lost = [&](const lockon::LossEvent&) {
                   b->unlock();  // another lock of the same renewal round
                   a_callback_done = true;
                 }});
  b.emplace(client, prefix + ":b", lockon::LockOptions{.ttl = 600ms});
  if (!c.try_lock()) return 4;
  std::this_thread::sleep_for(5ms);  // c falls due before a and b
  if (!a.try_lock() || !b->try_lock()) return 4;
  const std::stop_callback unlock_a(b->lost_token(), [&] {
    a.unlock();
    b_callback_done = true;
  });
  std::cout << "acquired" << std::endl;
  if (!await(a_callback_done, 5000ms) || !await(b_callback_done, 5000ms)) {
    std::cout << "callbacks stuck" << std::endl;
    std::_Exit(2);  // the watchdog is deadlocked: destructors would hang
  }
  std::cout << "callbacks done" << std::endl;
  const auto until = Clock::now() + 1800ms;
  while (Clock::now() < until) {
    if (c.lost()) {
      std::cout << "c lost" << std::endl;
      std::_Exit(3);
    }
    std::this_thread::sleep_for(10ms);
  }
  c.unlock();
  return 0;
}

LOCKON_WORKER_COMMAND(hold_paused)(const std::vector<std::string>& args) -> int {
  if (args.size() != 3) return usage("hold_paused URL LOCK TTL_MS");
  const lockon::Client client(args[0]);
  const std::chrono::milliseconds ttl(std::stoll(args[2]));
  lockon::Lock lock(client, args[1], {.ttl = ttl});
  if (!lock.try_lock()) return 4;
  std::this_thread::sleep_for(ttl / 2);
  std::cout << "holding" << std::endl;
  const auto give_up = Clock::now() + 10s;
  auto previous = Clock::now();
  while (previous < give_up) {
    std::this_thread::sleep_for(1ms);
    const auto now = Clock::now();
    if (now - previous > ttl) {
      std::cout << "first check lost=" << (lock.lost() ? 1 : 0) << std::endl;
      return 0;
    }
    previous = now;
  }
  return 1;
}
