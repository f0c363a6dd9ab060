// integration/test_redlock_faults.cpp — Redlock with nodes that are down,
// killed while held, paused (slow), or restarted empty.
#include <algorithm>
#include <atomic>
#include <thread>

#include "lockon/errors.hpp"
#include "redlock_support.hpp"
#include "support/fault_proxy.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class RedlockFaults : public RedlockServers {};

void expect_every_acquisition_succeeds(Redlock& lock, int times) {
  for (int i = 0; i < times; ++i) {
    ASSERT_TRUE(lock.try_lock_for(1s)) << "acquisition " << i;
    EXPECT_GT(lock.validity(), 0ms);
    lock.release();
  }
}

TEST_F(RedlockFaults, OneOfThreeDownEveryAcquisitionSucceeds) {
  start(3);
  server(1).kill();
  EventLog log;
  const std::string name = unique_key("one-down");
  Redlock lock(urls(), name, {.ttl = 2s}, {.on_node_event = log.hook()});
  // The missing node is reported through the hook at construction.
  const auto probes = log.of(NodeOperation::probe);
  ASSERT_EQ(probes.size(), 3u);
  for (const auto& probe : probes) {
    EXPECT_EQ(probe.ok(), probe.endpoint != endpoint(1)) << probe.endpoint << ": " << probe.detail;
    if (!probe.ok()) {
      EXPECT_FALSE(probe.detail.empty());
    }
  }
  expect_every_acquisition_succeeds(lock, 30);
  const auto acquires = log.of(NodeOperation::acquire);
  ASSERT_EQ(acquires.size(), 90u);
  EXPECT_EQ(std::count_if(acquires.begin(), acquires.end(), [](const NodeEvent& e) { return e.ok(); }), 60);
}

TEST_F(RedlockFaults, TwoOfFiveDownEveryAcquisitionSucceeds) {
  start(5);
  server(0).kill();
  server(3).kill();
  const std::string name = unique_key("two-of-five");
  Redlock lock(urls(), name, {.ttl = 2s, .fencing = true});
  EXPECT_EQ(lock.quorum(), 3u);
  std::uint64_t previous = 0;
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(lock.try_lock_for(1s)) << "acquisition " << i;
    EXPECT_GT(lock.fence(), previous);
    previous = lock.fence();
    lock.release();
  }
}

TEST_F(RedlockFaults, TwoOfThreeDownConstructionRefusesNamingTheNodes) {
  start(3);
  server(0).kill();
  server(2).kill();
  const std::string name = unique_key("refuse");
  EventLog log;
  try {
    Redlock lock(urls(), name, {}, {.on_node_event = log.hook()});
    FAIL() << "constructed with a minority of nodes";
  } catch (const QuorumError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("1 of 3"), std::string::npos) << message;
    EXPECT_NE(message.find("reachable: " + endpoint(1)), std::string::npos) << message;
    EXPECT_NE(message.find("unreachable: " + endpoint(0)), std::string::npos) << message;
    EXPECT_NE(message.find(endpoint(2)), std::string::npos) << message;
    EXPECT_EQ(error.name(), name);
  }
  EXPECT_EQ(log.of(NodeOperation::probe).size(), 3u);

  // Without the check the constructor does no I/O; the first acquisition
  // reports the missing majority.
  log.clear();
  Redlock unchecked(urls(), name, {}, {.check_nodes = false, .on_node_event = log.hook()});
  EXPECT_TRUE(log.events().empty());
  EXPECT_THROW(unchecked.try_lock(), QuorumError);
  EXPECT_EQ(log.of(NodeOperation::acquire).size(), 3u);
}

TEST_F(RedlockFaults, PasswordsNeverAppearInQuorumErrors) {
  ServerOptions options;
  options.requirepass = "s3cret-pa55";
  servers_ = start_servers(3, options);
  server(0).kill();
  server(1).kill();
  try {
    Redlock lock(urls(), unique_key("secret"));
    FAIL() << "constructed with a minority of nodes";
  } catch (const QuorumError& error) {
    EXPECT_EQ(std::string(error.what()).find("s3cret"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(endpoint(2)), std::string::npos) << error.what();
  }
}

TEST_F(RedlockFaults, TwoOfThreeDownOnARunningLockFailsWithQuorumErrorWithinTheDeadline) {
  start(3);
  const std::string name = unique_key("running");
  // A long lease: the survivor's key must be seen undone, which a loaded
  // machine may take over a second to show, and never seen expire.
  Redlock lock(urls(), name, {.ttl = 20s});
  ASSERT_TRUE(lock.try_lock());
  lock.release();
  server(0).kill();
  server(1).kill();
  const auto started = Clock::now();
  std::string why;
  try {
    (void)lock.try_lock_for(1s);
    ADD_FAILURE() << "try_lock_for returned with two of three nodes down";
  } catch (const QuorumError& error) {
    why = error.what();
  }
  EXPECT_LT(Clock::now() - started, 1s) << why;
  EXPECT_FALSE(lock.held());
  EXPECT_THROW(lock.try_lock(), QuorumError);
  EXPECT_THROW(lock.locked(), QuorumError);
  EXPECT_EQ(holders_settled(name, 0, 5s), 0);  // the attempt on the surviving node was undone, not left to expire
}

TEST_F(RedlockFaults, NodeKilledWhileHeldExtendAndReleaseStillSucceed) {
  start(3);
  const std::string name = unique_key("killed-while-held");
  Redlock lock(urls(), name, {.ttl = 2s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  server(2).kill();
  lock.extend(2s);
  EXPECT_GT(lock.validity(), 3000ms);
  EXPECT_TRUE(lock.owned());
  lock.reacquire();
  ASSERT_TRUE(lock.remaining_ttl().has_value());
  EXPECT_GT(*lock.remaining_ttl(), 1500ms);
  lock.release();
  EXPECT_EQ(holders_settled(name, 0), 0);
  EXPECT_FALSE(lock.lost());
}

TEST_F(RedlockFaults, RenewalKeepsTheLeaseWithAMajorityAndSignalsLossWithout) {
  start(3);
  const std::string name = unique_key("renew-faults");
  std::atomic<int> unreachable{0};
  Redlock lock(urls(), name, {.ttl = 300ms, .on_lost = [&](const LossEvent& event) {
                                if (event.reason == LossReason::unreachable) ++unreachable;
                              }});
  ASSERT_TRUE(lock.try_lock());
  server(0).kill();
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(lock.lost());
  EXPECT_TRUE(lock.owned());
  server(1).kill();
  const auto until = Clock::now() + 2s;
  while (!lock.lost() && Clock::now() < until) std::this_thread::sleep_for(2ms);
  const auto lost_seen = Clock::now();
  EXPECT_TRUE(lock.lost());
  // lost() turns true by the clock at the validity deadline; the watchdog's
  // on_lost follows once its renewal gives up.
  EXPECT_TRUE(eventually(1s, [&] { return unreachable.load() == 1; }));
  // Signalled by the end of the last confirmed validity, not later (the
  // watchdog may even give up a little early).
  EXPECT_LT(lost_seen, lock.validity_deadline() + 30ms);
  lock.unlock();
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), QuorumError);
}

// A frozen minority costs neither acquire nor release its per-node timeout:
// both are decided once a majority answered. The first fan-out gives the
// paused node a short grace period (it had been answering), the following
// ones none (it is suspected), except a probe every 100 ms.
TEST_F(RedlockFaults, PausedMinorityDelaysNeitherAcquisitionNorRelease) {
  start(3);
  const std::string name = unique_key("paused");
  EventLog log;
  // A 1 s per-node timeout: with 200 ms a healthy node starved of CPU for
  // that long (ctest -j2 beside 4-process Cluster tests) failed one
  // try_lock(). Waiting for the paused node would now cost 1 s, so the
  // bounds below stay as sharp.
  Redlock lock(urls(), name, {.ttl = 5s}, {.per_node_timeout = 1000ms, .on_node_event = log.hook()});
  ASSERT_TRUE(lock.try_lock());  // all up: every node trusted
  lock.release();
  server(1).pause();
  // The claim needs the two healthy nodes to answer promptly. Under ctest -j2
  // a healthy server can be starved of CPU for a second: such an iteration
  // proves nothing either way, so it is run again (at most 5 times in all).
  int redone = 0;
  const auto starved = [&](const std::vector<NodeEvent>& events) {
    for (const auto& event : events)
      if (event.endpoint != endpoint(1) && (!event.ok() || event.elapsed > 30ms)) return true;
    return false;
  };
  for (int i = 0; i < 20; ++i) {
    log.clear();
    const auto started = Clock::now();
    const bool acquired = lock.try_lock();
    const auto took = Clock::now() - started;
    const auto acquires = log.of(NodeOperation::acquire);
    if (starved(acquires) && redone < 5) {
      ++redone;
      if (acquired) lock.release();
      --i;
      continue;
    }
    ASSERT_TRUE(acquired) << "acquisition " << i << " (redone " << redone << ")";
    // Far below the 1 s per-node timeout: at most the grace period (the
    // time to a majority, >= 2 ms) plus scheduling noise.
    EXPECT_LT(took, 60ms) << "acquisition " << i;
    for (const auto& event : acquires) {
      EXPECT_EQ(event.ok(), event.endpoint != endpoint(1)) << event.endpoint << ": " << event.detail;
      if (event.endpoint == endpoint(1)) {
        EXPECT_NE(event.detail.find("not waited for"), std::string::npos) << event.detail;
      }
    }
    log.clear();
    const auto release_started = Clock::now();
    lock.release();
    const auto release_took = Clock::now() - release_started;
    if (starved(log.of(NodeOperation::release)) && redone < 5) {
      ++redone;
      continue;
    }
    EXPECT_LT(release_took, 60ms) << "release " << i;
    EXPECT_FALSE(lock.lost());
  }
  EXPECT_EQ(get(0, name), "");
  EXPECT_EQ(get(2, name), "");
  server(1).resume();
  // Back: it rejoins within a probe period and answers again. (It may
  // refuse for a while: the SETs it received while frozen ran when it
  // resumed, and those keys of ours expire by their TTL.)
  bool rejoined = false;
  for (int i = 0; i < 50 && !rejoined; ++i) {
    log.clear();
    ASSERT_TRUE(lock.try_lock());
    for (const auto& event : log.of(NodeOperation::acquire))
      if (event.endpoint == endpoint(1) && event.outcome != NodeOutcome::failed) rejoined = true;
    lock.release();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(rejoined) << "the resumed node never granted again";
}

// A node asleep for 2 s must cost the acquisition its per-node timeout
// (40 ms), not the sleep: the bound, 1 s, holds on a loaded machine and
// still fails a fan-out that waits for the sleeper. The sleeper is a
// jthread: an exception in the body must not unwind past a joinable thread
// (it terminated the binary under load).
TEST_F(RedlockFaults, DebugSleepingNodeDoesNotDelayAcquisitionBeyondItsTimeout) {
  start(3);
  const std::string name = unique_key("debug-sleep");
  Redlock lock(urls(), name, {.ttl = 5s}, {.per_node_timeout = 40ms});
  std::atomic<bool> sleeping{false};
  std::jthread sleeper([&] {
    sleeping = true;
    try {
      server(0).command({"DEBUG", "SLEEP", "2"});
    } catch (...) {  // the acquisition's bound is checked either way
    }
  });
  while (!sleeping) std::this_thread::yield();
  std::this_thread::sleep_for(50ms);  // the command has reached the server
  const auto started = Clock::now();
  const bool acquired = lock.try_lock();
  const auto took = Clock::now() - started;
  ASSERT_TRUE(acquired);
  EXPECT_LT(took, 1s) << "waited for the sleeping node";
  lock.release();
}

TEST_F(RedlockFaults, AcquisitionPastItsValidityIsReportedFailedAndReleasedEverywhere) {
  start(3);
  const std::string name = unique_key("too-slow");
  EventLog log;
  // Node 1 behind a proxy adding 100 ms each way, node 2 paused: the
  // majority (0 and 1) is complete only after ~200 ms, past the validity of
  // TTL - drift (300 - 0.4 x 300 - 2 = 178 ms), although both granted the
  // key — which still exists (300 ms) when released.
  lockon::test::FaultProxy slow("127.0.0.1", server(1).port());
  std::vector<std::string> nodes = urls();
  nodes[1] = slow.url();
  const std::string slow_endpoint = "127.0.0.1:" + std::to_string(slow.port());
  Redlock lock(nodes, name, {.ttl = 300ms, .auto_renew = false},
               {.drift_factor = 0.4, .per_node_timeout = 300ms, .on_node_event = log.hook()});
  // Warm: pooled connections everywhere, so the slow node costs one round
  // trip per fan-out (a fresh one would need three).
  slow.set_latency(0us);
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  slow.set_latency(100ms);
  log.clear();
  server(2).pause();
  const auto started = Clock::now();
  try {
    lock.try_lock_for(5s);
    FAIL() << "an acquisition past its validity was reported successful";
  } catch (const QuorumError& error) {
    EXPECT_NE(std::string(error.what()).find("validity"), std::string::npos) << error.what();
  }
  // Three failed attempts in a row (each ≈ 200 ms + 300 ms of cleanup),
  // then the error — long before the 5 s deadline. An attempt that finds
  // the key still on the slow node (an earlier attempt's late SET, or its
  // release not there yet: seen under ASan) counts as busy and restarts the
  // count, so there may be one or two more.
  EXPECT_LT(Clock::now() - started, 4s);
  EXPECT_FALSE(lock.held());
  const auto acquires = log.of(NodeOperation::acquire);
  ASSERT_EQ(acquires.size() % 3, 0u);
  const std::size_t attempts = acquires.size() / 3;
  ASSERT_GE(attempts, 3u);
  ASSERT_LE(attempts, 5u);
  EXPECT_GE(std::count_if(acquires.begin(), acquires.end(), [](const NodeEvent& e) { return e.ok(); }), 6);
  // Each attempt was released on every node that answered (or its key had
  // already expired: the decision came at the end of the validity); the
  // paused one failed.
  const auto releases = log.of(NodeOperation::release);
  ASSERT_GE(releases.size(), 9u);  // the three failed attempts (a plainly refused one releases nothing)
  ASSERT_LE(releases.size(), acquires.size());
  for (const auto& event : releases) {
    if (event.endpoint == endpoint(2)) {
      EXPECT_EQ(event.outcome, NodeOutcome::failed);
    } else {
      EXPECT_NE(event.outcome, NodeOutcome::failed) << event.endpoint << ": " << event.detail;
    }
  }
  // try_lock() gives up after its single attempt.
  log.clear();
  EXPECT_THROW(lock.try_lock(), QuorumError);
  EXPECT_EQ(log.of(NodeOperation::acquire).size(), 3u);
  EXPECT_EQ(get(0, name), "");
  EXPECT_EQ(get(1, name), "");
  server(2).resume();
}

// A node whose connection must be re-dialed when the lock is released (its
// pooled connection was dropped) answers the dial's PING late: the other two
// nodes decide the release first, and the release was never sent to it. It
// used to keep the key until its TTL (10 s); it is now retried in the
// background (lock/orphans.hpp) and gone within a second.
TEST_F(RedlockFaults, ReleaseNotYetSentToARedialedNodeIsRetriedInTheBackground) {
  start(3);
  const std::string name = unique_key("redialed");
  lockon::test::FaultProxy proxy("127.0.0.1", server(2).port());
  std::vector<std::string> nodes = urls();
  nodes[2] = proxy.url();
  for (int round = 0; round < 3; ++round) {
    // A fresh lock per round: warm connections everywhere, and no node
    // suspected by an earlier round (a suspected node's grant may be decided
    // without, and then never reach it).
    Redlock lock(nodes, name, {.ttl = 10s, .auto_renew = false}, {.per_node_timeout = 1s});
    ASSERT_TRUE(lock.try_lock()) << "round " << round;
    ASSERT_TRUE(eventually(1000ms, [&] { return holders(name) == 3; })) << "round " << round;
    proxy.drop_connections();  // the pooled connection to node 2 is gone
    // The dial's liveness probe (a raw PING) is held back: the dial is still
    // pending when nodes 0 and 1 have answered.
    const int rule = proxy.add_rule({.command = "PING", .action = FaultAction::delay, .delay = 300ms, .times = 1});
    const auto released = Clock::now();
    lock.unlock();
    EXPECT_EQ(lock.last_unlock_error(), nullptr) << "round " << round;
    EXPECT_LT(Clock::now() - released, 250ms) << "round " << round << ": unlock waited for the redialed node";
    EXPECT_EQ(get(0, name), "");
    EXPECT_EQ(get(1, name), "");
    EXPECT_TRUE(eventually(1500ms, [&] { return get(2, name).empty(); }))
        << "round " << round << ": node 2 keeps the released key (its TTL is 10 s)";
    proxy.remove_rule(rule);
  }
}

// Fences strictly increase over 500 acquisitions while nodes are killed and
// restarted empty, one at a time, each staying down longer than the TTL (the
// documented restart rule).
TEST_F(RedlockFaults, FencesStrictlyIncreaseWhileNodesRestartEmpty) {
  start(3);
  const std::string name = unique_key("fence-restarts");
  constexpr auto kTtl = 150ms;
  Redlock lock(urls(), name, {.ttl = kTtl, .auto_renew = false, .fencing = true},
               {.retry_delay_min = 1ms, .retry_delay_max = 5ms});
  const auto test_started = Clock::now();
  std::uint64_t previous = 0;
  std::size_t next_victim = 0;
  std::optional<std::size_t> down;
  Clock::time_point down_since;
  int restarts = 0;
  for (int i = 0; i < 500; ++i) {
    if (!down && i % 20 == 10) {
      down = next_victim;
      next_victim = (next_victim + 1) % 3;
      server(*down).kill();
      down_since = Clock::now();
    } else if (down && Clock::now() - down_since > kTtl + 20ms) {
      server(*down).restart();  // empty: no persistence
      ++restarts;
      // The very next node goes down right away: the restarted node holds
      // no counter, the last fence survives only on the third node.
      down = next_victim;
      next_victim = (next_victim + 1) % 3;
      server(*down).kill();
      down_since = Clock::now();
    }
    ASSERT_TRUE(lock.try_lock_for(2s)) << "acquisition " << i;
    ASSERT_GT(lock.fence(), previous) << "acquisition " << i << " after " << restarts << " restarts";
    previous = lock.fence();
    // unlock(), not release(): with one node down, a release needs both
    // others, and one of them answering late on a loaded machine is not this
    // test's subject (CI saw it once); unreleased keys expire after kTtl.
    lock.unlock();
    std::this_thread::sleep_for(8ms);
  }
  EXPECT_GE(restarts, 8);
  EXPECT_LT(Clock::now() - test_started, 30s);
}

}  // namespace
}  // namespace lockon::test
