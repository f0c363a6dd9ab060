// integration/test_script_keys.cpp — every key a lockon script touches is
// declared in its KEYS.
//
// Redis's scripting rule: "all names of keys accessed by a script must be
// provided as input key arguments". Redis itself does not enforce it on a
// single server or for keys of the same hash slot, but servers and proxies
// that do (Dragonfly by default, Alibaba Cloud's cluster proxy, Redis
// Enterprise's proxy in some modes) reject a script that derives a key
// inside Lua, and a cluster router can only route by declared keys.
//
// How it is checked, on a real server: MONITOR records every command the
// workload sends and every command its scripts run ("[db lua]" lines, which
// follow their EVAL/EVALSHA line: the server runs one command at a time);
// the server itself says which arguments of each script-run command are
// keys (COMMAND GETKEYS); each must be among the enclosing EVAL's KEYS.
// The workload goes through every script path of Lock (fast and queued
// acquisition, hand-over with holder records, fencing, extend, reacquire,
// renewal, a waiter giving up, a kept queue place abandoned), Redlock,
// ReadWriteLock, Semaphore, MultiLock and lock_on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "integration/script_keys_checker.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

using script_keys::Monitor;
using script_keys::MonitorLine;
using script_keys::parse_monitor_line;
using script_keys::Verdict;

class ScriptKeys : public RedisTest {
 protected:
  Verdict check(const std::vector<std::string>& lines) {
    return script_keys::check(lines, [](const std::vector<std::string>& args) {
      return script_keys::keys_on(server(), args);
    });
  }
};

TEST(ScriptKeysParsing, MonitorLinesAreSplitAndUnquoted) {
  const MonitorLine line = parse_monitor_line(R"(1795476566.385482 [0 lua] "SET" "a\"b\\c" "x\x01y" "")");
  EXPECT_EQ(line.origin, "lua");
  ASSERT_EQ(line.args.size(), 4u);
  EXPECT_EQ(line.args[0], "SET");
  EXPECT_EQ(line.args[1], "a\"b\\c");
  EXPECT_EQ(line.args[2], std::string("x\x01y"));
  EXPECT_EQ(line.args[3], "");
  const MonitorLine client = parse_monitor_line(R"(1.5 [3 127.0.0.1:4242] "evalsha" "abc" "1" "k")");
  EXPECT_EQ(client.origin, "127.0.0.1:4242");
  ASSERT_EQ(client.args.size(), 4u);
}

// Every script path of every primitive, under MONITOR.
TEST_F(ScriptKeys, EveryKeyAScriptTouchesIsDeclared) {
  Monitor monitor(server().host(), server().port());
  Client client(server().url());
  const std::string name = key("keys");
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
    // Queued waiters, hand-over with holder records, a waiter giving up, a
    // kept queue place abandoned.
    Lock holder(client, name, {.ttl = 5s, .fencing = true});
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
    std::this_thread::sleep_for(150ms);  // the waiter is queued behind the keeper
    holder.unlock();                     // handed to the keeper's kept place
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
    Redlock redlock(std::vector<Client>{client}, key("redlock"), {.ttl = 2s, .fencing = true});
    redlock.lock();
    redlock.extend(100ms);
    redlock.unlock();
  }
  {
    const std::string rw = key("rw");
    ReadWriteLock reader(client, rw), writer(client, rw);
    reader.lock_shared();
    std::thread queued_writer([&] {
      if (writer.try_lock_for(5s)) writer.unlock();
    });
    std::this_thread::sleep_for(100ms);
    reader.unlock_shared();
    queued_writer.join();
    const std::string sem = key("sem");
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
  {
    const std::string tag = key("m");
    MultiLock all(client, {"{" + tag + "}1", "{" + tag + "}2", "{" + tag + "}3"}, {.fencing = true});
    all.lock();
    all.unlock();
    RedisLocker locker(client);
    const auto locked = locker.lock_on<0>("script_keys", [](int x) { return x + 1; });
    EXPECT_EQ(locked(41), 42);
  }
  const std::string marker = "script-keys-end-" + name;
  server().command({"ECHO", marker});
  const Verdict verdict = check(monitor.read_until(marker));
  // The workload really ran scripts (a MONITOR that saw nothing proves nothing).
  EXPECT_GT(verdict.scripts, 20);
  EXPECT_GT(verdict.script_commands, 60);
  // The hand-over ran: scripts pop the queue by LINDEX, then LTRIM or DEL
  // at their end (protocol/lock_script_stage.hpp), no longer by LPOP.
  for (const char* command : {"SET", "PEXPIRE", "LINDEX", "RPUSH", "HSETNX"})
    EXPECT_EQ(verdict.commands.count(command), 1u) << command << " never ran in a script";
  EXPECT_TRUE(verdict.violations.empty()) << verdict.violations.size() << " undeclared key accesses; first: "
                                          << (verdict.violations.empty() ? "" : verdict.violations.front());
  std::set<std::string> distinct(verdict.violations.begin(), verdict.violations.end());
  for (const auto& violation : distinct) ADD_FAILURE() << violation;
}

}  // namespace
}  // namespace lockon::test
