// integration/test_redlock_deadlines.cpp — Redlock against nodes that accept
// no connection (black-holed ports): connects run in parallel and no
// operation outlasts the caller's deadline by more than a round trip.
#include <memory>
#include <vector>

#include "lockon/errors.hpp"
#include "redlock_support.hpp"
#include "support/black_hole_listener.hpp"
#include "support/held_back.hpp"
#include "support/precondition_rounds.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class RedlockDeadlines : public RedlockServers {
 protected:
  /// `healthy` real servers followed by `holes` black-holed ports.
  void start_with_holes(std::size_t healthy, std::size_t holes) {
    start(healthy);
    for (std::size_t i = 0; i < holes; ++i) holes_.push_back(std::make_unique<BlackHoleListener>());
  }
  std::vector<std::string> all_urls() const {
    std::vector<std::string> out = urls();
    for (const auto& hole : holes_) out.push_back(hole->url());
    return out;
  }

  std::vector<std::unique_ptr<BlackHoleListener>> holes_;
};

// Before: the two black-holed nodes were connected one after the other, 1 s
// connect timeout each, before the per-node deadline even started: every
// attempt took > 2 s, past the 2 s lease, so no acquisition succeeded.
TEST_F(RedlockDeadlines, TwoOfFiveBlackHoledAcquisitionsSucceedWellWithinTheValidity) {
  start_with_holes(3, 2);
  const std::string name = unique_key("two-holes");
  Redlock lock(all_urls(), name, {.ttl = 2s, .auto_renew = false, .fencing = true});
  ASSERT_EQ(lock.quorum(), 3u);
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    ASSERT_TRUE(lock.try_lock_for(5s)) << "acquisition " << i;
    const auto took = Clock::now() - start;
    // Auto per-node timeout 25 ms: acquire + fence write-back each wait it
    // out once for the holes, in parallel.
    EXPECT_LT(took, 400ms) << "acquisition " << i;
    EXPECT_GT(lock.validity(), 1500ms) << "acquisition " << i;
    EXPECT_EQ(holders(name), 3);
    lock.unlock();
    EXPECT_FALSE(lock.last_unlock_error()) << "release " << i;
  }
}

// Before: QuorumError came after > 3 s (three sequential 1 s connects per
// attempt), far past the 100 ms the caller allowed.
TEST_F(RedlockDeadlines, ThreeOfFiveBlackHoledQuorumErrorArrivesWithinTheCallersTimeout) {
  start_with_holes(2, 3);
  // Timing-bound: a call the machine held back (this process's threads
  // waiting for a CPU, schedstat: held_back.hpp) past the bound did not
  // establish the precondition and is set up again; one over the bound
  // without those waits fails.
  in_rounds(5, 60s, [&]() -> std::string {
    const std::string name = unique_key("three-holes");
    // A per-node timeout longer than the caller's whole budget: the budget wins.
    Redlock lock(all_urls(), name, {.ttl = 10s, .auto_renew = false}, {.per_node_timeout = 300ms, .check_nodes = false});
    const auto waits_before = thread_run_queue_waits(0);
    const auto start = Clock::now();
    EXPECT_THROW(lock.try_lock_for(100ms), QuorumError);
    const auto took = Clock::now() - start;
    const auto held_back = std::chrono::nanoseconds(added_wait_ns(waits_before, thread_run_queue_waits(0)));
    const auto bound = 100ms + 60ms;  // one round trip plus scheduling slack
    if (took >= bound && took - held_back < bound)
      return "the call took " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()) +
             " ms, of which the machine held it back " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(held_back).count()) + " ms";
    EXPECT_LT(took, bound);
    EXPECT_FALSE(lock.held());
    // The two healthy nodes were sent the cleanup (under load its reply may
    // come after the caller's deadline: the DEL runs all the same). Seen
    // within 5 s: under ASan at ctest -j4 it took over 1 s to arrive.
    EXPECT_TRUE(eventually(5s, [&] { return holders(name) == 0; }));
    return {};
  });
}

// The retry loop's sleep is cut at the caller's deadline; before, the loop
// then sent one more fan-out at the deadline, whose grants the caller never
// used (cleaned up, or left to their TTL when the answer came late). Found by
// review (session 20); this test fails on that code: two attempts per node.
TEST_F(RedlockDeadlines, NoAttemptIsSentWhenTheRetrySleepReachesTheDeadline) {
  start(3);
  const std::string name = unique_key("deadline-retry");
  Redlock holder(urls(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(holder.try_lock());
  Redlock waiter(urls(), name, {.ttl = 10s, .auto_renew = false},
                 {.retry_delay_min = 400ms, .retry_delay_max = 400ms, .check_nodes = false});
  std::vector<RawConnection> admins;
  std::vector<long long> before;
  for (std::size_t i = 0; i < count(); ++i) {
    admins.push_back(server(i).connect());
    before.push_back(commandstats_calls(admins.back(), "set"));
  }
  const auto start = Clock::now();
  EXPECT_FALSE(waiter.try_lock_for(60ms));
  EXPECT_LT(Clock::now() - start, 60ms + 100ms);
  for (std::size_t i = 0; i < count(); ++i)
    // One attempt: one SET NX per node (unfenced), refused by each.
    EXPECT_EQ(commandstats_calls(admins[i], "set") - before[i], 1) << "node " << i;
  EXPECT_TRUE(holder.held());
}

TEST_F(RedlockDeadlines, ThreeOfFiveBlackHoledWithTheAutomaticTimeoutFailsFast) {
  start_with_holes(2, 3);
  const std::string name = unique_key("three-holes-auto");
  Redlock lock(all_urls(), name, {.ttl = 5s, .auto_renew = false}, {.check_nodes = false});
  const auto start = Clock::now();
  EXPECT_THROW(lock.try_lock_for(2s), QuorumError);
  // Three attempts of ~2 × 50 ms (acquire, cleanup) plus two random delays
  // of at most 200 ms: well under the caller's 2 s.
  EXPECT_LT(Clock::now() - start, 1s);
}

TEST_F(RedlockDeadlines, ConstructionWithTwoOfFiveBlackHoledIsBoundedByTheProbeTimeout) {
  start_with_holes(3, 2);
  EventLog log;
  const auto start = Clock::now();
  Redlock lock(all_urls(), unique_key("probe"), {.ttl = 2s}, {.on_node_event = log.hook()});
  EXPECT_LT(Clock::now() - start, 400ms);  // one 100 ms probe window, not 2 × 1 s
  const auto probes = log.of(NodeOperation::probe);
  ASSERT_EQ(probes.size(), 5u);
  for (std::size_t i = 3; i < 5; ++i) {
    EXPECT_FALSE(probes[i].ok());
    EXPECT_NE(probes[i].detail.find("no connection within"), std::string::npos) << probes[i].detail;
  }
}

// Before: a frozen node accepts TCP (the kernel does it), so a fresh
// connection's handshake (AUTH here) waited for the 1 s socket timeout, node
// after node: 2 s per attempt, past the 2 s lease.
TEST_F(RedlockDeadlines, TwoOfFiveFrozenNodesWithFreshConnectionsCostOneWindow) {
  servers_ = start_servers(5, {.requirepass = "frozen-secret"});
  server(3).pause();
  server(4).pause();
  const std::string name = unique_key("frozen");
  for (int i = 0; i < 3; ++i) {
    // A new Redlock from URLs has new clients: every connection is fresh.
    Redlock lock(urls(), name, {.ttl = 2s, .auto_renew = false}, {.check_nodes = false});
    const auto start = Clock::now();
    ASSERT_TRUE(lock.try_lock_for(5s)) << "acquisition " << i;
    EXPECT_LT(Clock::now() - start, 400ms) << "acquisition " << i;
    EXPECT_GT(lock.validity(), 1500ms);
    lock.unlock();
    EXPECT_FALSE(lock.last_unlock_error());
  }
  server(3).resume();
  server(4).resume();
}

}  // namespace
}  // namespace lockon::test
