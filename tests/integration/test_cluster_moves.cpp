// integration/test_cluster_moves.cpp — Redis Cluster (issue 14) when slots
// and masters move: a slot migration under a held lock with waiters queued,
// leases renewed across a move, 4 processes exact while slots migrate
// mid-run, a waiter following its slot, a manual failover with a held lock
// and a waiter, and a crashed master (SIGKILL) mid-run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <typeinfo>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/slots.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/redlock.hpp"

#include "cluster_test_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::key_slot;

class ClusterMoves : public ClusterTest {};

// The slot of a held lock moves to another master (IMPORTING/MIGRATING,
// MIGRATE, SETSLOT NODE) while three waiters are queued; the holder releases
// while the slot is half-moved (ASK). Every waiter gets the lock in turn, no
// call outlives its deadline.
TEST_F(ClusterMoves, SlotMigrationUnderAHeldLockWithWaitersQueued) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[0], "migrate");
  const int slot = key_slot(name);
  const Client client(cluster().url());
  Lock holder(client, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());
  constexpr int kWaiters = 3;
  constexpr auto kWaitBound = 15s;
  std::atomic<int> acquired{0};
  std::atomic<long long> longest_call{0};
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::vector<std::thread> waiters;
  for (int w = 0; w < kWaiters; ++w) {
    waiters.emplace_back([&] {
      const Client mine(cluster().url());
      Lock lock(mine, name, {.ttl = 20s, .wait_poll_interval = 2s});
      const auto start = Clock::now();
      const bool got = lock.try_lock_for(kWaitBound);
      longest_call = std::max<long long>(longest_call.load(), ms_since(start));
      if (!got) return;
      if (inside.fetch_add(1) != 0) overlap = true;
      std::this_thread::sleep_for(30ms);
      inside.fetch_sub(1);
      ++acquired;
      lock.unlock();
    });
  }
  // Queued: the queue key holds three entries.
  RedisServer& from = *masters[0];
  const std::string queue = "{" + name + "}:q";
  for (int i = 0; i < 300 && from.command({"LLEN", queue}).integer < kWaiters; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(from.command({"LLEN", queue}).integer, kWaiters);

  const auto migration = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(migration);
  {
    RawConnection target = masters[1]->connect();  // the slot is importing there: ASKING first
    ASSERT_TRUE(target.command({"ASKING"}).is("OK"));
    EXPECT_EQ(target.command({"EXISTS", name}).integer, 1) << "the lock key moved with its slot";
  }
  holder.unlock();  // the slot is half-moved: ASK to the target
  std::this_thread::sleep_for(50ms);
  cluster().finish_migration(migration);
  for (auto& waiter : waiters) waiter.join();
  EXPECT_EQ(acquired.load(), kWaiters) << "a hand-over was lost in the migration";
  EXPECT_FALSE(overlap.load());
  EXPECT_LE(longest_call.load(), std::chrono::duration_cast<std::chrono::milliseconds>(kWaitBound).count() + 500);
  std::cout << "slot migration: longest wait " << longest_call.load() << " ms\n";
  // Move it back so later tests see the original layout.
  const auto back = cluster().begin_migration(slot, from);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// A release while its slot is half-moved gets TRYAGAIN from the importing
// node (the lock key is there, its companions are not) until the migration
// ends. The blocking front waits for it by time — up to the socket timeout,
// 3 s here — as the async front does; it used to give up after 16 back-offs
// (~0.9 s) and the release failed with the slot still migrating.
TEST_F(ClusterMoves, ReleaseWaitsOutALongMigrationByTime) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[0], "long-migration");
  const int slot = key_slot(name);
  const Client client(cluster().url() + "?socket_timeout=3s");
  {
    Lock warm(client, name, {.ttl = 10s});  // the map is read, the slot on masters[0]
    ASSERT_TRUE(warm.try_lock());
    warm.unlock();
  }
  const auto migration = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(migration);
  Lock held(client, name, {.ttl = 10s});
  ASSERT_TRUE(held.try_lock());
  {
    RawConnection target = masters[1]->connect();
    ASSERT_TRUE(target.command({"ASKING"}).is("OK"));
    ASSERT_EQ(target.command({"EXISTS", name}).integer, 1) << "written to the importing node via ASK";
  }
  std::atomic<bool> released{false};
  std::atomic<long long> took_ms{-1};
  std::string error;
  std::thread releaser([&] {
    const auto start = Clock::now();
    try {
      held.release();
      released = true;
    } catch (const std::exception& e) {
      error = e.what();
    }
    took_ms = ms_since(start);
  });
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(released.load()) << "released while the slot was still half-moved";
  EXPECT_EQ(took_ms.load(), -1) << "the release gave up during the migration: " << error;
  cluster().finish_migration(migration);
  releaser.join();
  EXPECT_EQ(error, "");
  EXPECT_TRUE(released.load());
  EXPECT_GE(took_ms.load(), 1400);
  EXPECT_LT(took_ms.load(), 3500) << "bounded by the socket timeout";
  EXPECT_EQ(masters[1]->command({"EXISTS", name}).integer, 0) << "released on the new owner";
  Lock again(client, name, {.ttl = 10s});
  EXPECT_TRUE(again.try_lock());
  again.unlock();
  const auto back = cluster().begin_migration(slot, *masters[0]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// A lock taken while its slot is half-moved: the key is not on the source,
// so the acquisition is redirected (ASK) to the importing node. Its
// pipeline (SET NX + the holder record's SET) needs ASKING before each
// command — with one ASKING in front the record's SET was answered MOVED
// after the lock's SET ran, the pipeline was resent until the redirection
// limit, and a custom token then found itself in the key ("token in use").
TEST_F(ClusterMoves, LockTakenMidMigrationRunsItsWholePipelineOnTheTarget) {
  // (A fenced lock's MULTI also touches the fence counter: with that key
  // missing on the importing node it gets TRYAGAIN until the migration
  // ends, which routed_call waits for by time — the release test above.)
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[0], "ask-pipeline");
  const int slot = key_slot(name);
  const Client client(cluster().url());
  {
    Lock warm(client, name, {.ttl = 10s});  // the map is read
    ASSERT_TRUE(warm.try_lock());
    warm.unlock();
  }
  const auto migration = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(migration);
  const std::string token = "custom-token-" + name;
  Lock lock(client, name, {.ttl = 10s, .token = token, .holder_label = "mid-migration"});
  const auto start = Clock::now();
  bool got = false;
  std::string error;
  try {
    got = lock.try_lock();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const long long took = ms_since(start);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(got);
  EXPECT_LT(took, 300) << "no redirection loop";
  {
    RawConnection target = masters[1]->connect();
    ASSERT_TRUE(target.command({"ASKING"}).is("OK"));
    EXPECT_EQ(target.command({"GET", name}).str, token);
    ASSERT_TRUE(target.command({"ASKING"}).is("OK"));
    const std::string record = target.command({"GET", lock_companion_key(name, "who")}).str;
    EXPECT_NE(record.find("|mid-migration|"), std::string::npos) << "the record was written with the lock: " << record;
  }
  EXPECT_EQ(masters[0]->command({"EXISTS", name}).integer, 0) << "nothing written on the source";
  cluster().finish_migration(migration);
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_EQ(masters[1]->command({"EXISTS", name}).integer, 0) << "released on the new owner";
  const auto back = cluster().begin_migration(slot, *masters[0]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// The watchdog renews each lease on its own slot's master: short leases on
// every shard outlive five times their TTL, and one whose slot moves
// mid-hold keeps being renewed on the new master.
TEST_F(ClusterMoves, WatchdogRenewsLeasesOnEveryShardAndAfterASlotMove) {
  const Client client(cluster().url());
  const auto masters = cluster().masters();
  std::vector<std::unique_ptr<Lock>> locks;
  for (RedisServer* master : masters) {
    for (int i = 0; i < 3; ++i) {
      // 1 s leases (renewed every 333 ms): 300 ms ones were lost under ASan
      // in CI when one node stalled the watchdog's round for ~1 s (see the
      // next test).
      locks.push_back(std::make_unique<Lock>(client, name_on(*master, "renew-" + std::to_string(i)),
                                             LockOptions{.ttl = 1000ms}));
      ASSERT_TRUE(locks.back()->try_lock());
    }
  }
  const std::string moving = locks.front()->name();
  std::this_thread::sleep_for(2000ms);
  const auto migration = cluster().begin_migration(key_slot(moving), *masters[1]);
  cluster().migrate_keys(migration);
  cluster().finish_migration(migration);
  std::this_thread::sleep_for(3000ms);
  for (const auto& lock : locks) {
    EXPECT_FALSE(lock->lost()) << lock->name();
    EXPECT_TRUE(lock->owned()) << lock->name();
  }
  EXPECT_EQ(masters[1]->command({"EXISTS", moving}).integer, 1);
  for (const auto& lock : locks) lock->unlock();
  const auto back = cluster().begin_migration(key_slot(moving), *masters[0]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// Four processes increment counters under their locks while the slots of
// some of those keys move between masters and back, several times: every
// request the migration bounces (ASK, MOVED, TRYAGAIN) is followed, and the
// counters stay exact.
TEST_F(ClusterMoves, FourProcessesStayExactWhileSlotsMigrateMidRun) {
  constexpr int kWorkers = 4;
  constexpr int kKeys = 6;
  constexpr int kRounds = 400;
  const std::string prefix = unique_key("mig");
  std::vector<Child> workers;
  for (int w = 0; w < kWorkers; ++w)
    // A 5 s socket timeout: under ASan on 2 cores (CI, session 7) one node
    // once answered nobody for over 1 s mid-run (cause not found; every
    // worker timed out on the same node at the same moment); the exactness
    // checked here does not depend on that bound.
    workers.push_back(spawn(worker_argv("cluster_increment", {cluster().url() + "?socket_timeout=5s", prefix,
                                                              std::to_string(kKeys), std::to_string(kRounds)})));
  const auto masters = cluster().masters();
  int moves = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (int k = 0; k < 2; ++k) {
      const int slot = key_slot(prefix + ":" + std::to_string(k));
      RedisServer& owner = cluster().owner_of_slot(slot);
      RedisServer& other = *masters[(std::find(masters.begin(), masters.end(), &owner) - masters.begin() + 1) % 3];
      const auto migration = cluster().begin_migration(slot, other);
      std::this_thread::sleep_for(20ms);  // requests meet a MIGRATING/IMPORTING slot
      cluster().migrate_keys(migration);
      std::this_thread::sleep_for(20ms);
      cluster().finish_migration(migration);
      ++moves;
      std::this_thread::sleep_for(50ms);
    }
  }
  // The moves happened mid-run, not after it.
  EXPECT_TRUE(std::any_of(workers.begin(), workers.end(), [](Child& worker) { return worker.running(); }))
      << "the workers finished before the migrations did: the test proved nothing";
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(120s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  std::cout << moves << " slot moves during " << kWorkers * kKeys * kRounds << " critical sections\n";
  const Client client(cluster().url());
  for (int k = 0; k < kKeys; ++k) {
    const Reply value = client.command({"GET", "{" + prefix + ":" + std::to_string(k) + "}:n"});
    EXPECT_EQ(value.as_string(), std::to_string(kWorkers * kRounds)) << "key " << k;
  }
}

// A waiter queued before its key's slot moves follows it: the old master's
// server-sent `sunsubscribe` nudges it, its next attempt follows the MOVED,
// and it re-subscribes on the new master, where the release's SPUBLISH
// reaches it well before its 10 s poll interval.
TEST_F(ClusterMoves, WaiterFollowsItsSlotToTheNewMaster) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[1], "follow");
  const int slot = key_slot(name);
  const Client client(cluster().url());
  Lock holder(client, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<long long> acquired_after{-1};
  std::atomic<long long> released_ns{0};
  std::jthread waiter([&] {
    const Client mine(cluster().url());
    Lock lock(mine, name, {.ttl = 20s, .wait_poll_interval = 10s});
    if (lock.try_lock_for(8s)) {
      acquired_after = (Clock::now().time_since_epoch().count() - released_ns.load()) / 1'000'000;
      lock.unlock();
    }
  });
  const std::string queue = "{" + name + "}:q";
  for (int i = 0; i < 300 && masters[1]->command({"LLEN", queue}).integer < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(masters[1]->command({"LLEN", queue}).integer, 1);
  const auto migration = cluster().begin_migration(slot, *masters[2]);
  cluster().migrate_keys(migration);
  cluster().finish_migration(migration);
  // The waiter re-subscribes on the new master.
  bool listening = false;
  for (int i = 0; i < 300 && !listening; ++i) {
    listening = !masters[2]->command({"PUBSUB", "SHARDCHANNELS", "{" + name + "}:wake:*"}).elements.empty();
    if (!listening) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(listening) << "the waiter never subscribed on the slot's new master";
  std::this_thread::sleep_for(100ms);
  released_ns = Clock::now().time_since_epoch().count();
  holder.unlock();
  waiter.join();
  EXPECT_GE(acquired_after.load(), 0) << "the waiter never got the lock";
  EXPECT_LT(acquired_after.load(), 1000) << "the hand-over after the move was not delivered by message";
  const auto back = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// A manual failover of the master serving a set of locks, mid-run: errors
// during the switch are typed lockon errors, and locking works again within
// a bound (measured and printed; docs/benchmarks.md and README quote it).
TEST_F(ClusterMoves, MasterFailoverMidRunRecoversWithTypedErrors) {
  auto masters = cluster().masters();
  RedisServer& master = *masters[2];
  RedisServer& replica = cluster().replica_of(master);
  const Client client(cluster().url(), {.size = 4});
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) names.push_back(name_on(master, "failover-" + std::to_string(i)));
  std::atomic<bool> stop{false};
  std::atomic<long long> ok{0};
  std::atomic<long long> typed_errors{0};
  std::atomic<long long> other_errors{0};
  std::atomic<long long> last_error_ns{0};
  std::map<std::string, int> error_kinds;
  std::mutex kinds_mutex;
  std::jthread runner([&] {
    for (std::size_t i = 0; !stop; ++i) {
      try {
        Lock lock(client, names[i % names.size()], {.ttl = 5s});
        if (lock.try_lock_for(2s)) {
          lock.unlock();
          ++ok;
        }
      } catch (const Error& e) {
        ++typed_errors;
        last_error_ns = Clock::now().time_since_epoch().count();
        std::lock_guard lock(kinds_mutex);
        ++error_kinds[typeid(e).name()];
      } catch (...) {
        ++other_errors;
      }
    }
  });
  // A lock held across the switch, with a waiter queued behind it.
  const std::string held_name = name_on(master, "failover-held");
  const Client holder_client(cluster().url());
  Lock held(holder_client, held_name, {.ttl = 3s, .fencing = true});
  ASSERT_TRUE(held.try_lock());
  const std::uint64_t fence_before = held.fence();
  std::atomic<long long> waiter_after_release{-1};
  std::atomic<long long> released_ns{0};
  std::thread waiter([&] {
    const Client mine(cluster().url());
    Lock lock(mine, held_name, {.ttl = 3s, .fencing = true, .wait_poll_interval = 10s});
    if (lock.try_lock_for(15s)) {
      waiter_after_release = (Clock::now().time_since_epoch().count() - released_ns.load()) / 1'000'000;
      EXPECT_GT(lock.fence(), fence_before);
      lock.unlock();
    }
  });
  std::this_thread::sleep_for(300ms);
  const long long before = ok.load();
  const auto failover_start = Clock::now();
  cluster().failover(replica);
  const long long switched_ms = ms_since(failover_start);
  // Recovery: the first successful cycle after the switch completed.
  const long long at_switch = ok.load();
  while (ok.load() == at_switch && ms_since(failover_start) < 20'000) std::this_thread::sleep_for(1ms);
  const long long recovered_ms = ms_since(failover_start);
  std::this_thread::sleep_for(300ms);
  // Precondition, set up rather than assumed (slow under ASan): the waiter
  // listens on the new master (its subscriber followed the slot) before the release.
  EXPECT_TRUE(eventually(10s, [&] {
    return !replica.command({"PUBSUB", "SHARDCHANNELS", "*" + held_name + "*wake:*"}).elements.empty();
  })) << "the waiter never listened on the new master";
  // The held lock survived the coordinated switch (renewed on the new
  // master meanwhile) and its waiter, re-subscribed there, is handed it.
  EXPECT_TRUE(held.owned());
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(replica.command({"GET", held_name}).type, RawReply::Type::string);
  released_ns = Clock::now().time_since_epoch().count();
  held.unlock();
  waiter.join();
  EXPECT_GE(waiter_after_release.load(), 0) << "the waiter never got the lock";
  EXPECT_LT(waiter_after_release.load(), 1500) << "no wake-up after the failover";
  std::cout << "failover: waiter handed the lock " << waiter_after_release.load() << " ms after the release\n";
  stop = true;
  runner.join();
  std::cout << "failover: switch took " << switched_ms << " ms, first lock cycle after it at " << recovered_ms
            << " ms; cycles before " << before << ", total " << ok.load() << ", typed errors " << typed_errors.load()
            << "\n";
  for (const auto& [kind, count] : error_kinds) std::cout << "  " << kind << ": " << count << "\n";
  EXPECT_GT(before, 0);
  EXPECT_EQ(other_errors.load(), 0) << "an error that is not a lockon::Error";
  EXPECT_LT(recovered_ms - switched_ms, 3000) << "locking did not recover within 3 s of the switch";
  EXPECT_GT(ok.load(), at_switch);
  // The new master serves the locks now.
  EXPECT_EQ(&cluster().owner_of_slot(key_slot(names[0])), &replica);
  // Restore the original roles for later tests.
  cluster().failover(master);
}

// A master crashes (SIGKILL) mid-run: its replica is promoted after
// cluster-node-timeout (2 s here). Meanwhile calls on its keys fail with
// typed lockon errors (or time out) and never outlive their deadline; after
// the promotion locking works again within a measured bound. Runs last: the
// killed node stays down.
TEST_F(ClusterMoves, ZzMasterCrashFailoverRecoversWithinABound) {
  auto masters = cluster().masters();
  RedisServer& master = *masters[0];
  RedisServer& replica = cluster().replica_of(master);
  const Client client(cluster().url(), {.size = 4});
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) names.push_back(name_on(master, "crash-" + std::to_string(i)));
  std::atomic<bool> stop{false};
  std::atomic<long long> ok{0};
  std::atomic<long long> typed_errors{0};
  std::atomic<long long> other_errors{0};
  std::atomic<long long> longest_call{0};
  std::atomic<long long> first_ok_after_kill_ns{0};
  std::atomic<long long> kill_ns{0};
  std::map<std::string, int> error_kinds;
  std::mutex kinds_mutex;
  constexpr auto kDeadline = 1s;
  std::jthread runner([&] {
    for (std::size_t i = 0; !stop; ++i) {
      const auto start = Clock::now();
      const long long started_ns = start.time_since_epoch().count();
      try {
        Lock lock(client, names[i % names.size()], {.ttl = 5s});
        if (lock.try_lock_for(kDeadline)) {
          lock.unlock();
          ++ok;
          // Only a cycle begun after the crash counts as recovered.
          if (kill_ns.load() != 0 && started_ns > kill_ns.load() && first_ok_after_kill_ns.load() == 0)
            first_ok_after_kill_ns = Clock::now().time_since_epoch().count();
        }
      } catch (const Error& e) {
        ++typed_errors;
        std::lock_guard lock(kinds_mutex);
        ++error_kinds[typeid(e).name()];
        std::this_thread::sleep_for(10ms);
      } catch (...) {
        ++other_errors;
      }
      longest_call = std::max<long long>(longest_call.load(), ms_since(start));
    }
  });
  std::this_thread::sleep_for(300ms);
  ASSERT_GT(ok.load(), 0);
  // Counted from when the master is gone (kill() returns once it is reaped):
  // a cycle begun between the signal and the death was still served by it
  // (CI once saw "recovered" 1 ms after the kill, before any failover).
  master.kill();
  kill_ns = Clock::now().time_since_epoch().count();
  const auto killed_at = Clock::now();
  while (first_ok_after_kill_ns.load() == 0 && ms_since(killed_at) < 30'000) std::this_thread::sleep_for(5ms);
  const long long recovered_ms = (first_ok_after_kill_ns.load() - kill_ns.load()) / 1'000'000;
  std::this_thread::sleep_for(300ms);
  stop = true;
  runner.join();
  std::cout << "crash failover: first lock cycle " << recovered_ms << " ms after SIGKILL (cluster-node-timeout 2000 ms)"
            << "; typed errors " << typed_errors.load() << ", longest call " << longest_call.load() << " ms\n";
  for (const auto& [kind, count] : error_kinds) std::cout << "  " << kind << ": " << count << "\n";
  EXPECT_GT(first_ok_after_kill_ns.load(), 0) << "never recovered";
  EXPECT_LT(recovered_ms, 8000) << "recovery took longer than node timeout + 6 s";
  EXPECT_EQ(other_errors.load(), 0);
  // try_lock_for(1 s), plus at most one socket/connect timeout (1 s each) for
  // a request already sent, plus the clean-up grace.
  EXPECT_LT(longest_call.load(), 3500) << "a call outlived its deadline by far";
  const RawReply role = replica.command({"ROLE"});
  EXPECT_EQ(role.elements.at(0).str, "master");
}

}  // namespace
}  // namespace lockon::test
