// integration/test_watchdog_lanes.cpp — the watchdog under faults: a frozen
// server must not hold up another server's renewals or unlocks, and loss
// callbacks must be free to unlock other locks (no lockon mutex held).
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class WatchdogLanes : public ClientTest {};

// Server A is SIGSTOPped while a lock on it is due for renewal; the renewal
// to A blocks for A's socket timeout. A lock on the healthy shared server
// must keep being renewed meanwhile, and its unlock must not wait for A.
TEST_F(WatchdogLanes, FrozenServerDelaysNeitherRenewalsNorUnlocksOnAnotherServer) {
  RedisServer frozen;
  ConnectionOptions frozen_options = ConnectionOptions::from_url(frozen.url());
  frozen_options.socket_timeout = 2000ms;
  Client frozen_client(frozen_options);
  Lock on_frozen(frozen_client, key("frozen"), {.ttl = 600ms});
  ASSERT_TRUE(on_frozen.try_lock());
  frozen.pause();

  const std::string name = key("healthy");
  Lock healthy(client(), name, {.ttl = 300ms});
  ASSERT_TRUE(healthy.try_lock());
  // From ~200 ms on, the frozen lock's renewal is stuck in A's socket for up
  // to 2 s; observe the healthy lease over four of its TTLs in that window.
  const auto start = Clock::now();
  int renewals_seen = 0;
  long long previous = pttl(name);
  while (Clock::now() - start < 1200ms) {
    std::this_thread::sleep_for(20ms);
    const long long left = pttl(name);
    ASSERT_GT(left, 0) << "the healthy lease lapsed after " << ms_since(start) << " ms";
    if (left > previous) ++renewals_seen;
    previous = left;
  }
  EXPECT_GE(renewals_seen, 6) << "renewals of the healthy lock stalled behind the frozen server";
  EXPECT_FALSE(healthy.lost());

  const auto unlock_start = Clock::now();
  healthy.unlock();
  const long long unlock_ms = ms_since(unlock_start);
  EXPECT_LT(unlock_ms, 50) << "unlock on the healthy server waited behind the frozen one";
  EXPECT_FALSE(exists(name));
  frozen.resume();
}

// Two locks of one renewal round are lost together; the on_lost of one
// unlocks the other, whose stop callback unlocks the first. The renewal
// thread must survive (no lockon mutex held during callbacks) and keep
// renewing a third lock. Runs in a worker: a deadlocked watchdog would hang
// the process at exit.
TEST_F(WatchdogLanes, LossCallbacksMayUnlockLocksOfTheSameRound) {
  const std::string prefix = key("cross");
  Child worker = spawn(worker_argv("cross_unlock", {server().url(), prefix}));
  ASSERT_TRUE(worker.wait_for_output("acquired", 5000ms)) << worker.wait(100ms).describe();
  // a and b vanish; freezing the server past their due time stalls c's
  // renewal (due 5 ms earlier) so that a and b are renewed in one round.
  raw({"DEL", prefix + ":a", prefix + ":b"});
  server().pause();
  std::this_thread::sleep_for(300ms);  // the fault's duration, not a wait for an event
  server().resume();
  ASSERT_TRUE(worker.wait_for_output("callbacks done", 3000ms)) << worker.wait(100ms).describe();
  // c is still renewed after the callbacks ran: over three of its TTLs.
  const auto start = Clock::now();
  while (Clock::now() - start < 1500ms && worker.running()) {
    const long long left = pttl(prefix + ":c");
    ASSERT_GT(left, 0) << "c lapsed " << ms_since(start) << " ms after the callbacks";
    std::this_thread::sleep_for(50ms);
  }
  const ProcessResult result = worker.wait(3000ms);
  EXPECT_TRUE(result.succeeded()) << result.describe();
}

// A holder frozen (SIGSTOP) for longer than its TTL must see lost() true at
// its very first check after SIGCONT, before any renewal round trip.
TEST_F(WatchdogLanes, HolderResumedAfterItsLeaseEndedSeesLostAtOnce) {
  Child holder = spawn(worker_argv("hold_paused", {server().url(), key("paused"), "300"}));
  ASSERT_TRUE(holder.wait_for_output("holding", 5000ms)) << holder.wait(100ms).describe();
  holder.kill(SIGSTOP);
  std::this_thread::sleep_for(700ms);  // the freeze itself: over two TTLs
  holder.kill(SIGCONT);
  const ProcessResult result = holder.wait(5000ms);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_NE(result.out.find("first check lost=1"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace lockon::test
