// integration/test_redlock.cpp — Redlock with every node up: the algorithm's
// observable effects on each node, the DistributedLock surface, validation,
// renewal and loss, and mutual exclusion across processes.
#include <atomic>
#include <iostream>
#include <mutex>
#include <thread>

#include "lockon/errors.hpp"
#include "redlock_support.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class RedlockBasics : public RedlockServers {
 protected:
  void SetUp() override { start(3); }
};

TEST_F(RedlockBasics, AcquireSetsTheSameTokenOnEveryNodeAndReleaseDeletesIt) {
  EventLog log;
  const std::string name = unique_key("basic");
  Redlock lock(urls(), name, {.ttl = 5s, .auto_renew = false}, {.on_node_event = log.hook()});
  EXPECT_EQ(lock.node_count(), 3u);
  EXPECT_EQ(lock.quorum(), 2u);
  EXPECT_EQ(lock.per_node_timeout(), 50ms);  // clamp(5000/100, 25, 200), ≤ ttl/4
  EXPECT_EQ(lock.validity_deadline(), Clock::time_point::min());
  ASSERT_EQ(log.of(NodeOperation::probe).size(), 3u);

  const auto before = Clock::now();
  ASSERT_TRUE(lock.try_lock());
  EXPECT_TRUE(lock.held());
  ASSERT_EQ(holders_settled(name, 3), 3);
  const std::string token = get(0, name);
  ASSERT_EQ(token.size(), 32u);
  EXPECT_EQ(get(1, name), token);
  EXPECT_EQ(get(2, name), token);
  for (std::size_t i = 0; i < 3; ++i) {
    const long long pttl = server(i).command({"PTTL", name}).integer;
    EXPECT_GT(pttl, 4900);
    EXPECT_LE(pttl, 5000);
  }
  // validity = start + ttl − (ttl × 0.01 + 2 ms).
  EXPECT_LE(lock.validity_deadline(), Clock::now() + 5000ms - 52ms);
  EXPECT_GT(lock.validity_deadline(), before + 5000ms - 53ms);
  EXPECT_GT(lock.validity(), 4800ms);
  EXPECT_EQ(lock.fence(), 0u);

  // A majority's replies decide; a straggler's is not waited for (its SET
  // still ran: holders_settled above), which its event says. Under load
  // (ctest -j2) the third node does straggle now and then.
  const auto acquires = log.of(NodeOperation::acquire);
  ASSERT_EQ(acquires.size(), 3u);
  std::size_t ok = 0;
  for (const auto& event : acquires) {
    if (event.ok()) ++ok;
    else EXPECT_NE(event.detail.find("not waited for"), std::string::npos) << event.endpoint << ": " << event.detail;
    EXPECT_EQ(event.name, name);
    EXPECT_LT(event.elapsed, 1s);
  }
  EXPECT_GE(ok, 2u);

  lock.unlock();
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_EQ(holders_settled(name, 0), 0);
  EXPECT_EQ(lock.validity(), 0ms);
  ASSERT_EQ(log.of(NodeOperation::release).size(), 3u);
  for (const auto& event : log.events()) {
    EXPECT_EQ(event.detail.find(token), std::string::npos) << "token leaked into an event";
    EXPECT_FALSE(event.endpoint.empty());
  }
}

TEST_F(RedlockBasics, UsableThroughDistributedLockAndStandardGuards) {
  const std::string name = unique_key("guards");
  std::unique_ptr<DistributedLock> lock = std::make_unique<Redlock>(urls(), name, LockOptions{.ttl = 5s});
  {
    std::unique_lock guard(*lock);
    EXPECT_TRUE(lock->held());
    EXPECT_EQ(holders_settled(name, 3), 3);
    EXPECT_TRUE(lock->owned());
    EXPECT_TRUE(lock->locked());
  }
  EXPECT_FALSE(lock->held());
  EXPECT_EQ(holders_settled(name, 0), 0);
  EXPECT_FALSE(lock->locked());
  {
    LockGuard guard(*lock, 1s);
    EXPECT_TRUE(lock->held());
  }
  EXPECT_THROW(lock->release(), LockError);
}

TEST_F(RedlockBasics, ContendedTryLockFailsAndTimedWaitHonoursTheDeadline) {
  const std::string name = unique_key("contended");
  Redlock holder(urls(), name, {.ttl = 5s});
  Redlock waiter(urls(), name, {.ttl = 5s}, {.retry_delay_min = 5ms, .retry_delay_max = 40ms});
  ASSERT_TRUE(holder.try_lock());
  EXPECT_THROW(holder.try_lock(), LockError);  // not reentrant
  EXPECT_FALSE(waiter.try_lock());
  EXPECT_EQ(holders(name), 3);  // the refused attempt touched nothing

  auto started = Clock::now();
  EXPECT_FALSE(waiter.try_lock_for(150ms));
  auto waited = Clock::now() - started;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 150ms + 100ms);
  EXPECT_EQ(get(0, name), get(1, name));

  std::thread releaser([&] {
    std::this_thread::sleep_for(100ms);
    holder.unlock();
  });
  started = Clock::now();
  const bool acquired = waiter.try_lock_for(3s);
  waited = Clock::now() - started;
  releaser.join();
  ASSERT_TRUE(acquired);
  EXPECT_GE(waited, 90ms);
  EXPECT_LT(waited, 1s);
  EXPECT_TRUE(waiter.owned());
  EXPECT_FALSE(holder.held());
  waiter.unlock();
}

TEST_F(RedlockBasics, ExtendReacquireAndQueries) {
  const std::string name = unique_key("extend");
  Redlock lock(urls(), name, {.ttl = 2s, .auto_renew = false});
  EXPECT_FALSE(lock.owned());
  EXPECT_EQ(lock.remaining_ttl(), std::nullopt);
  EXPECT_THROW(lock.extend(1s), LockError);
  EXPECT_THROW(lock.reacquire(), LockError);
  ASSERT_TRUE(lock.try_lock());
  EXPECT_THROW(lock.extend(0ms), ConfigError);

  const auto deadline0 = lock.validity_deadline();
  lock.extend(3s);
  const auto deadline1 = lock.validity_deadline();
  EXPECT_GT(deadline1 - deadline0, 2900ms);
  EXPECT_LE(deadline1 - deadline0, 3000ms);
  // A majority decides: the third node's extension may land just after the
  // call returned (not waited for; it failed once under ctest -j2 with 2000).
  const auto pttl_of = [&](std::size_t i) { return server(i).command({"PTTL", name}).integer; };
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(eventually(500ms, [&] { return pttl_of(i) > 4800; })) << "node " << i << ": " << pttl_of(i);
  const auto ttl = lock.remaining_ttl();
  ASSERT_TRUE(ttl.has_value());
  EXPECT_GT(*ttl, 4800ms);

  lock.extend(1s, /*replace_ttl=*/true);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(eventually(500ms, [&] { return pttl_of(i) <= 1000; })) << "node " << i << ": " << pttl_of(i);
  EXPECT_LT(lock.validity_deadline(), Clock::now() + 1s);

  lock.reacquire();
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(eventually(500ms, [&] { return pttl_of(i) > 1900; })) << "node " << i << ": " << pttl_of(i);

  // A node that lost the key (restart without persistence, eviction) gets it
  // back on the next extension: redsync's SetNXOnExtend lesson.
  const std::string token = get(0, name);
  server(2).command({"DEL", name});
  lock.extend(1s);
  EXPECT_EQ(get(2, name), token);
  EXPECT_GT(server(2).command({"PTTL", name}).integer, 1000);

  // A key holding another token is never overwritten; with a majority still
  // ours the extension succeeds.
  server(2).command({"SET", name, "someone-else", "PX", "10000"});
  lock.extend(1s);
  EXPECT_EQ(get(2, name), "someone-else");
  EXPECT_TRUE(lock.owned());

  // Taken on a majority: extend reports the loss.
  server(1).command({"SET", name, "someone-else", "PX", "10000"});
  EXPECT_FALSE(lock.owned());
  EXPECT_TRUE(lock.locked());
  EXPECT_THROW(lock.extend(1s), LockNotOwned);
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(lock.lost_token().stop_requested());
  EXPECT_THROW(lock.release(), LockNotOwned);
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(get(1, name), "someone-else");
}

TEST_F(RedlockBasics, RejectsInvalidConfigurationWithoutTalkingToServers) {
  const std::string name = unique_key("config");
  EXPECT_THROW(Redlock(std::vector<Client>{}, name), ConfigError);
  EXPECT_THROW(Redlock(std::vector<std::string>{urls()[0], urls()[0]}, name), ConfigError);
  EXPECT_THROW(Redlock(std::vector<std::string>{urls()[0], urls()[0] + "/3"}, name), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {.no_expiry = true}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {.ttl = 0ms}), ConfigError);
  EXPECT_THROW(Redlock(urls(), "", {}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.drift_factor = -0.1}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.drift_factor = 0.5}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.per_node_timeout = -1ms}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.per_node_timeout = std::chrono::milliseconds::max()}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.retry_delay_min = 50ms, .retry_delay_max = 10ms}), ConfigError);
  EXPECT_THROW(Redlock(urls(), name, {}, {.retry_delay_min = 0ms, .retry_delay_max = 0ms}), ConfigError);
  EXPECT_THROW(Redlock(std::vector<std::string>{"http://nope"}, name), ConfigError);
  // Automatic per-node timeouts.
  EXPECT_EQ(Redlock(urls(), name, {.ttl = 60s}).per_node_timeout(), 200ms);
  EXPECT_EQ(Redlock(urls(), name, {.ttl = 10s}).per_node_timeout(), 100ms);
  EXPECT_EQ(Redlock(urls(), name, {.ttl = 1s}).per_node_timeout(), 25ms);
  EXPECT_EQ(Redlock(urls(), name, {.ttl = 60ms}).per_node_timeout(), 15ms);
  EXPECT_EQ(Redlock(urls(), name, {.ttl = 1s}, {.per_node_timeout = 7ms}).per_node_timeout(), 7ms);
  EXPECT_EQ(holders(name), 0);
}

TEST_F(RedlockBasics, FencesIncreaseAndLiveInTheKeysHashSlot) {
  const std::string name = unique_key("fence");
  Redlock lock(urls(), name, {.ttl = 5s, .auto_renew = false, .fencing = true});
  std::uint64_t previous = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(lock.try_lock());
    EXPECT_GT(lock.fence(), previous);
    previous = lock.fence();
    lock.unlock();
  }
  // Every node recorded the last fence (fences start at the servers'
  // clocks in µs, so they are not 1, 2, 3...).
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(get(i, "{" + name + "}:fence"), std::to_string(previous));

  // A key with a hash tag keeps it: the companion is key + ":fence".
  const std::string tagged = "{" + unique_key("tag") + "}.lock";
  Redlock tagged_lock(urls(), tagged, {.ttl = 5s, .fencing = true});
  ASSERT_TRUE(tagged_lock.try_lock());
  EXPECT_GT(tagged_lock.fence(), 0u);
  EXPECT_EQ(get(0, tagged + ":fence"), std::to_string(tagged_lock.fence()));
  tagged_lock.unlock();

  // A node whose counter is behind (it missed writes) is raised to the max.
  // The case needs the attempt to hear node 0, the one ahead: an attempt is
  // decided once a majority answered, and one decided by nodes 1 and 2
  // while node 0 was slow (under ASan in CI) rightly issues their max. That
  // attempt proves nothing here and is set up again (5 at most).
  const std::string fence_key = "{" + name + "}:fence";
  bool heard_node_0 = false;
  for (int attempt = 0; attempt < 5 && !heard_node_0; ++attempt) {
    server(2).command({"SET", fence_key, "3"});
    server(0).command({"SET", fence_key, "18446744073709551610"});
    ASSERT_TRUE(lock.try_lock());
    heard_node_0 = lock.fence() == 18446744073709551611u;
    if (heard_node_0) {
      // The fence is written back to every node (the last may answer late).
      for (std::size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(eventually(2s, [&] { return get(i, fence_key) == "18446744073709551611"; })) << "node " << i;
    }
    lock.unlock();
  }
  EXPECT_TRUE(heard_node_0) << "no attempt heard the node whose counter was ahead";

  // A garbage counter fails that node only.
  server(1).command({"SET", "{" + name + "}:fence", "not-a-number"});
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(lock.fence(), 18446744073709551612u);
  lock.unlock();
}

// A node granting with a garbage fence counter is a failed node, and must
// not count towards deciding the fan-out early: with it voting yes, the
// attempt was decided as soon as it and one healthy node answered, a third
// (healthy, 20 ms slower) node went unheard, and try_lock failed with a
// QuorumError (seen once under ASan in CI, where the third node was slow).
TEST_F(RedlockBasics, GarbageFenceCounterDoesNotDecideTheAttemptEarly) {
  const std::string name = unique_key("garbage-vote");
  Redlock lock(urls(), name, {.ttl = 5s, .auto_renew = false, .fencing = true}, {.per_node_timeout = 1000ms});
  ASSERT_TRUE(lock.try_lock());  // every node answering and trusted
  lock.unlock();
  // unlock() returns once a majority released: a straggler's release may
  // still be on its way (or retried in the background). Each round must
  // start on free nodes, or a refusal decides it. (CI, ASan, once: node 0
  // refused all three rounds; its key was not checked to be gone.)
  const auto all_free = [&] { return eventually(2s, [&] { return holders(name) == 0; }); };
  ASSERT_TRUE(all_free()) << holders(name) << " nodes still hold the key 2 s after unlock()";
  server(1).command({"SET", "{" + name + "}:fence", "not-a-number"});
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(all_free()) << "round " << round << ": " << holders(name) << " nodes still hold the key";
    RawConnection sleeper = server(2).connect();
    std::thread slow([&] { sleeper.command({"DEBUG", "SLEEP", "0.02"}); });
    std::this_thread::sleep_for(5ms);  // node 2 is asleep now
    bool acquired = false;
    std::string error;
    try {
      acquired = lock.try_lock();
    } catch (const std::exception& e) {
      error = e.what();
    }
    slow.join();
    EXPECT_EQ(error, "") << "round " << round;
    EXPECT_TRUE(acquired) << "round " << round;
    if (acquired) lock.unlock();
  }
}

TEST_F(RedlockBasics, WatchdogRenewsOnAMajority) {
  const std::string name = unique_key("renew");
  std::atomic<int> lost_calls{0};
  Redlock lock(urls(), name, {.ttl = 300ms, .on_lost = [&](const LossEvent&) { ++lost_calls; }});
  ASSERT_TRUE(lock.try_lock());
  const auto first_deadline = lock.validity_deadline();
  std::this_thread::sleep_for(800ms);  // well past the 300 ms lease
  EXPECT_TRUE(lock.owned());
  EXPECT_FALSE(lock.lost());
  EXPECT_GT(lock.validity_deadline(), first_deadline + 400ms);
  EXPECT_GT(lock.validity(), 0ms);
  EXPECT_EQ(holders(name), 3);
  lock.unlock();
  EXPECT_EQ(lost_calls.load(), 0);
  // unlock() returns once a majority confirmed; a third node's release may
  // still be on its way (not waited for, or retried in the background when
  // its connection was being re-dialed). Seen under ASan.
  EXPECT_TRUE(eventually(1000ms, [&] { return holders(name) == 0; })) << holders(name) << " nodes still hold it";
  std::this_thread::sleep_for(200ms);  // no renewal after unlock re-creates a key
  EXPECT_EQ(holders(name), 0);
}

TEST_F(RedlockBasics, LossIsSignalledWhenAMajorityIsTaken) {
  const std::string name = unique_key("taken");
  std::mutex mutex;
  std::optional<LossEvent> loss;
  Redlock lock(urls(), name, {.ttl = 300ms, .on_lost = [&](const LossEvent& event) {
                                std::lock_guard guard(mutex);
                                loss = event;
                              }});
  ASSERT_TRUE(lock.try_lock());
  const std::stop_token lost = lock.lost_token();
  const std::string token = get(0, name);
  server(0).command({"SET", name, "intruder", "PX", "10000"});
  server(1).command({"SET", name, "intruder", "PX", "10000"});
  const auto until = Clock::now() + 2s;
  while (!lost.stop_requested() && Clock::now() < until) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(lost.stop_requested());
  EXPECT_TRUE(lock.lost());
  {
    std::lock_guard guard(mutex);
    ASSERT_TRUE(loss.has_value());
    EXPECT_EQ(loss->reason, LossReason::taken);
    EXPECT_EQ(loss->name, name);
    EXPECT_EQ(loss->detail.find(token), std::string::npos);
  }
  lock.unlock();
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), LockNotOwned);
  EXPECT_EQ(get(0, name), "intruder");
  // Our own key is released: unlock() returns once the answers decide the
  // outcome (here the two taken nodes' "not owned"), and a third node's
  // release may still be on its way (settled in the background, by design:
  // issue 18's paused minority); seen once under ctest -j2.
  EXPECT_TRUE(eventually(2000ms, [&] { return get(2, name).empty(); })) << "our key still on node 2";
}

TEST_F(RedlockBasics, MutualExclusionAcrossFourProcesses) {
  const std::string name = unique_key("mutex");
  const std::string counter = unique_key("counter");
  const std::string fences = unique_key("fences");
  constexpr int kProcesses = 4;
  constexpr int kSections = 150;
  // All processes start competing at the same instant.
  const auto start_at = Clock::now() + 400ms;
  const std::string start_ns =
      std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(start_at.time_since_epoch()).count());
  std::vector<Child> workers;
  for (int i = 0; i < kProcesses; ++i)
    workers.push_back(spawn(worker_argv(
        "redlock_increment", {urls_csv(), counter, name, std::to_string(kSections), fences, "20", start_ns})));
  long long contended = 0;
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(60s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
    const std::string done = "done " + std::to_string(kSections) + " contended ";
    const auto at = result.out.find(done);
    ASSERT_NE(at, std::string::npos) << result.describe();
    contended += std::stoll(result.out.substr(at + done.size()));
  }
  std::cout << "sections that found the lock held first: " << contended << " of " << kProcesses * kSections << "\n";
  EXPECT_GT(contended, 0) << "the processes never competed: the test proves nothing";
  EXPECT_EQ(get(0, counter), std::to_string(kProcesses * kSections));
  // Fences, pushed in critical-section order, strictly increase across processes.
  const RawReply list = server(0).command({"LRANGE", fences, "0", "-1"});
  ASSERT_EQ(list.elements.size(), static_cast<std::size_t>(kProcesses * kSections));
  for (std::size_t i = 1; i < list.elements.size(); ++i)
    EXPECT_LT(std::stoull(list.elements[i - 1].str), std::stoull(list.elements[i].str)) << "at " << i;
  // Released everywhere, except that a node not waited for (the attempt was
  // decided by the others) may run its SET after the release and keep our
  // token until its TTL (10 s; seen once under ASan): by the TTL, never later.
  EXPECT_TRUE(eventually(12s, [&] { return holders(name) == 0; })) << holders(name) << " node(s) still hold it";
}

}  // namespace
}  // namespace lockon::test
