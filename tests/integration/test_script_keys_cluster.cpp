// integration/test_script_keys_cluster.cpp — every key a lockon script
// touches is declared, on Redis Cluster, where the scripts wake waiters with
// SPUBLISH (the sharded variants). Redis flags SPUBLISH's channel not_key
// (COMMAND GETKEYS: "no key arguments"), so the key checker cannot see it;
// the channel is built inside Lua (wake prefix .. subscriber id), so it is
// checked separately: it must hash to the script's own slot (the slot of its
// declared keys), or the publish would be a cross-slot access on a cluster.
// MONITOR on the master serving every key of the workload (Lock contention
// with hand-over and holder records, a waiter giving up, a kept place
// abandoned, renewal, MultiLock, ReadWriteLock, Semaphore); checker shared
// with the single-server test (script_keys_checker.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration/cluster_test_fixture.hpp"
#include "integration/script_keys_checker.hpp"
#include "client/slots.hpp"
#include "lockon/lockon.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class ScriptKeysCluster : public ClusterTest {};

TEST_F(ScriptKeysCluster, EveryKeyAShardedScriptTouchesIsDeclared) {
  RedisServer& master = *cluster().masters().front();
  script_keys::Monitor monitor(master.host(), master.port());
  const Client client(cluster().url());
  const std::string name = name_on(master, "keys");
  {
    // Fast path, fencing, holder record, extend, reacquire, renewal.
    Lock lock(client, name, {.ttl = 600ms, .fencing = true, .holder_label = "script-keys"});
    lock.lock();
    lock.extend(200ms);
    lock.reacquire();
    std::this_thread::sleep_for(450ms);  // the watchdog renews at ttl/3
    lock.unlock();
    ASSERT_EQ(lock.last_unlock_error(), nullptr);
  }
  {
    // Contention: queued waiters, hand-over by SPUBLISH with holder records,
    // a waiter giving up, a kept queue place taken and one abandoned.
    Lock holder(client, name, {.ttl = 5s, .fencing = true, .holder_label = "holder"});
    holder.lock();
    Lock quitter(client, name, {.ttl = 5s});
    EXPECT_FALSE(quitter.try_lock_for(50ms));
    Lock keeper(client, name, {.ttl = 5s, .keep_queue_place = true});
    EXPECT_FALSE(keeper.try_lock_for(50ms));
    std::atomic<bool> waiter_got{false};
    std::thread waiter([&] {
      Lock next(client, name, {.ttl = 5s, .fencing = true, .holder_label = "waiter"});
      if (next.try_lock_for(5s)) {
        waiter_got = true;
        next.unlock();
      }
    });
    std::this_thread::sleep_for(150ms);
    holder.unlock();  // handed to the keeper's kept place
    EXPECT_TRUE(keeper.try_lock_for(1s));
    keeper.unlock();  // handed on to the waiter
    waiter.join();
    EXPECT_TRUE(waiter_got);
    Lock kept(client, name, {.ttl = 5s, .keep_queue_place = true});
    Lock blocker(client, name, {.ttl = 5s});
    blocker.lock();
    EXPECT_FALSE(kept.try_lock_for(50ms));
    kept.abandon_wait();
    blocker.unlock();
  }
  {
    const std::string tag = name_on(master, "m");
    MultiLock all(client, {"{" + tag + "}1", "{" + tag + "}2", "{" + tag + "}3"}, {.fencing = true});
    all.lock();
    MultiLock other(client, {"{" + tag + "}2", "{" + tag + "}3"});
    std::thread queued([&] {
      if (other.try_lock_for(5s)) other.unlock();
    });
    std::this_thread::sleep_for(100ms);
    all.unlock();
    queued.join();
  }
  {
    const std::string rw = name_on(master, "rw");
    ReadWriteLock reader(client, rw), writer(client, rw);
    reader.lock_shared();
    std::thread queued_writer([&] {
      if (writer.try_lock_for(5s)) writer.unlock();
    });
    std::this_thread::sleep_for(100ms);
    reader.unlock_shared();
    queued_writer.join();
    const std::string sem = name_on(master, "sem");
    Semaphore one(client, sem, 1), two(client, sem, 1);
    one.acquire();
    EXPECT_FALSE(two.try_acquire_for(50ms));
    std::thread queued([&] {
      if (two.try_acquire_for(5s)) two.release();
    });
    std::this_thread::sleep_for(100ms);
    one.release();
    queued.join();
  }
  const std::string marker = "script-keys-cluster-end-" + name;
  master.command({"ECHO", marker});
  const std::vector<std::string> lines = monitor.read_until(marker);
  const script_keys::Verdict verdict =
      script_keys::check(lines, [&](const std::vector<std::string>& args) { return script_keys::keys_on(master, args); });
  // Every SPUBLISH a script runs publishes in the script's own slot.
  int spublished = 0;
  int script_slot = -1;
  for (const auto& text : lines) {
    const script_keys::MonitorLine line = script_keys::parse_monitor_line(text);
    if (line.args.empty()) continue;
    if (line.origin != "lua") {
      script_slot = script_keys::is_script_call(line.args[0]) && line.args.size() > 3 && line.args[2] != "0"
                        ? detail::key_slot(line.args[3])
                        : -1;
      continue;
    }
    if (line.args[0] != "SPUBLISH" || line.args.size() < 2) continue;
    ++spublished;
    EXPECT_EQ(detail::key_slot(line.args[1]), script_slot)
        << "a script published on channel '" << line.args[1] << "' outside its keys' slot";
  }
  EXPECT_GT(spublished, 0) << "no sharded wake-up ran: the SPUBLISH variants were not exercised";
  std::printf("[attack9] cluster master %d: %d scripts, %d script commands, %d SPUBLISH (channels in the script's "
              "slot), %zu undeclared keys\n",
              master.port(), verdict.scripts, verdict.script_commands, spublished, verdict.violations.size());
  EXPECT_GT(verdict.scripts, 20);
  EXPECT_GT(verdict.script_commands, 60);
  // The sharded variants ran (a hand-over wakes by SPUBLISH on a cluster).
  // (The queue is popped by LINDEX, then LTRIM or DEL: protocol/lock_script_stage.hpp.)
  for (const char* command : {"SET", "PEXPIRE", "LINDEX", "RPUSH", "HSETNX", "SPUBLISH"})
    EXPECT_EQ(verdict.commands.count(command), 1u) << command << " never ran in a script";
  EXPECT_TRUE(verdict.violations.empty()) << verdict.violations.size() << " undeclared key accesses; first: "
                                          << (verdict.violations.empty() ? "" : verdict.violations.front());
  std::set<std::string> distinct(verdict.violations.begin(), verdict.violations.end());
  for (const auto& violation : distinct) ADD_FAILURE() << violation;
}

}  // namespace
}  // namespace lockon::test
