// workers/handoff_spin_workers.cpp — a process whose lone waiter polls its
// wake-up socket (LockOptions::handoff_spin), for
// tests/integration/test_lock_handoff_spin_faults.cpp.
//
//   spin_waiter URL LOCK TTL_MS GO_KEY
//       Warm-up: locks and unlocks LOCK (handoff_spin 20 ms, wait_poll_interval
//       50 ms, TTL_MS lease) while the test's holder alternates with it, until
//       this process caught 5 hand-overs while polling (at most 2000 turns or
//       15 s); prints "warm <caught>". Then waits (bounded, 10 s) for GO_KEY to
//       exist — the test then holds LOCK — and waits for LOCK once more
//       (try_lock_for 20 s), holding it 50 ms. Prints "acquired <steady-ns>"
//       and "released <steady-ns>" (or "timeout"), exits 0; exit 1 when the
//       warm-up did not poll.
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_hooks.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

long long steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

LOCKON_WORKER_COMMAND(spin_waiter)(const std::vector<std::string>& args) -> int {
  using namespace std::chrono_literals;
  if (args.size() != 4) {
    std::cerr << "usage: spin_waiter URL LOCK TTL_MS GO_KEY\n";
    return 2;
  }
  const lockon::Client client(args[0]);
  lockon::Lock lock(client, args[1],
                    {.ttl = std::chrono::milliseconds(std::stoll(args[2])), .wait_poll_interval = 50ms,
                     .handoff_spin = 20ms});
  const auto before = lockon::detail::test_hooks::seen_while_polling.load();
  const auto warm_until = Clock::now() + 15s;
  for (int i = 0; i < 2000 && lockon::detail::test_hooks::seen_while_polling.load() - before < 5 && Clock::now() < warm_until; ++i) {
    if (!lock.try_lock_for(10s)) break;
    lock.unlock();
  }
  const auto caught = lockon::detail::test_hooks::seen_while_polling.load() - before;
  std::cout << "warm " << caught << std::endl;
  if (caught == 0) return 1;
  const auto go_until = Clock::now() + 10s;
  while (client.command({"EXISTS", args[3]}).as_integer() != 1) {
    if (Clock::now() >= go_until) return 1;
    std::this_thread::sleep_for(1ms);
  }
  if (!lock.try_lock_for(20s)) {
    std::cout << "timeout" << std::endl;
    return 0;
  }
  std::cout << "acquired " << steady_ns() << std::endl;
  std::this_thread::sleep_for(50ms);
  const long long released = steady_ns();
  lock.unlock();
  std::cout << "released " << released << std::endl;
  return 0;
}
