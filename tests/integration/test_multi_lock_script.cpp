// integration/test_multi_lock_script.cpp — MultiLock's single-script path
// (src/multi/one_script.cpp): free keys on one server are taken in ONE
// script round trip, all with one token, each key's fence raised and its
// holder record written; a busy key makes the script take nothing and the
// acquisition falls back to the ordered path and waits; a queued waiter is
// never jumped; counters stay exact with threads and processes locking in
// both orders; a SIGKILLed holder frees every key within its TTL; the
// watchdog renews adopted keys and a lost key is reported.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class MultiLockScript : public ClientTest {
 protected:
  // The tests count script calls: the script's first use on a server costs
  // EVALSHA (NOSCRIPT) + EVAL. ctest runs each test in its own process with
  // its own server, so load it here, once per test, by using it.
  void SetUp() override {
    ClientTest::SetUp();
    if (HasFatalFailure()) return;
    MultiLock warm(client(), {key("warm:a"), key("warm:b")});
    ASSERT_TRUE(warm.try_lock());
    warm.unlock();
  }

  long long scripts() { return scripts_run(*raw_); }
  long long calls(const std::string& command) { return commandstats_calls(*raw_, command); }
  long long number(const std::string& name) {
    const RawReply reply = raw({"GET", name});
    return reply.is_nil() ? 0 : std::stoll(reply.str);
  }
};

TEST_F(MultiLockScript, FreeKeysAreTakenInOneScriptWithOneTokenFencesAndRecords) {
  const std::string base = key("acct");
  const std::vector<std::string> names{base + ":d", base + ":b", base + ":a", base + ":c"};
  MultiLock all(client(), names, {.fencing = true, .holder_label = "one-script"});
  std::vector<std::uint64_t> last(names.size(), 0);
  raw({"SCRIPT", "FLUSH"});  // the first use costs EVALSHA (NOSCRIPT) + EVAL: counted once below
  for (int round = 0; round < 3; ++round) {
    const long long scripts_before = scripts();
    const long long sets_before = calls("set");
    const long long multi_before = calls("multi");
    ASSERT_TRUE(all.try_lock());
    // Round 0 finds the script not loaded yet: NOSCRIPT, then EVAL.
    EXPECT_EQ(scripts() - scripts_before, round == 0 ? 2 : 1) << "4 free keys must cost one script round trip";
    EXPECT_EQ(calls("multi"), multi_before) << "the Lock's fenced fast path (MULTI) was used";
    // Inside the one script: a SET per key, per fence counter, per record.
    EXPECT_EQ(calls("set") - sets_before, 3 * static_cast<long long>(names.size()));
    const std::string token = value(names[0]);
    ASSERT_FALSE(token.empty());
    for (std::size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(value(names[i]), token) << "every key holds the one token";
      EXPECT_GT(pttl(names[i]), 0);
      EXPECT_GT(all.fence(i), last[i]) << "key " << names[i] << "'s fence did not increase";
      EXPECT_GT(all.fence(i), 1'000'000'000'000'000ull) << "fences start at the server clock (µs)";
      last[i] = all.fence(i);
      const std::string record = value(lock_companion_key(names[i], "who"));
      EXPECT_EQ(record.substr(0, 8), token.substr(0, 8)) << "holder record of " << names[i] << ": " << record;
      EXPECT_NE(record.find("|one-script|"), std::string::npos) << record;
      EXPECT_GT(pttl(lock_companion_key(names[i], "who")), 0) << "the record expires with the lease";
    }
    EXPECT_TRUE(all.owned());
    Lock plain(client(), names[2]);
    EXPECT_FALSE(plain.try_lock()) << "a plain Lock must be excluded from an adopted key";
    all.release();
    for (const std::string& name : names) {
      EXPECT_FALSE(exists(name));
      EXPECT_FALSE(exists(lock_companion_key(name, "who"))) << "the release deletes the record";
    }
  }
  // A plain Lock after the script: the fence keeps increasing across paths.
  Lock plain(client(), names[1], {.fencing = true});
  ASSERT_TRUE(plain.try_lock());
  EXPECT_GT(plain.fence(), last[1]);
  plain.release();
}

TEST_F(MultiLockScript, ABusyKeyTakesNothingThenTheOrderedPathWaits) {
  const std::string base = key("busy");
  const std::string a = base + ":a", b = base + ":b", c = base + ":c";
  Lock holder(client(), b);
  ASSERT_TRUE(holder.try_lock());
  MultiLock all(client(), {c, a, b});
  const long long before = scripts();
  EXPECT_FALSE(all.try_lock());
  EXPECT_EQ(scripts() - before, 1) << "a single attempt with a held key: the script alone, nothing else";
  EXPECT_FALSE(exists(a)) << "the script must take nothing when one key is busy";
  EXPECT_FALSE(exists(c));

  std::thread release([&] {
    std::this_thread::sleep_for(200ms);
    holder.unlock();
  });
  const auto start = Clock::now();
  const bool got = all.try_lock_for(5s);
  const long long took = ms_since(start);
  release.join();
  ASSERT_TRUE(got);
  EXPECT_GE(took, 150) << "acquired while b was still held";
  EXPECT_LT(took, 1500);
  EXPECT_TRUE(all.owned());
  all.release();
  for (const std::string& name : {a, b, c}) EXPECT_FALSE(exists(name));
}

// b is held and a plain Lock is queued for it: the MultiLock (started after
// the waiter queued) must not get b before that waiter had it.
TEST_F(MultiLockScript, AQueuedWaiterIsNotJumped) {
  const std::string base = key("fifo");
  const std::string a = base + ":a", b = base + ":b";
  const std::string order = base + ":order";
  Lock holder(client(), b);
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> waiter_done{false};
  std::jthread waiter([&] {
    Client own(server().url());
    Lock lock(own, b);
    if (lock.try_lock_for(5s)) {
      own.command({"RPUSH", order, "waiter"});
      std::this_thread::sleep_for(100ms);
      lock.unlock();
    }
    waiter_done = true;
  });
  ASSERT_TRUE(eventually(3s, [&] { return raw({"LLEN", lock_companion_key(b, "q")}).integer == 1; }))
      << "the waiter never queued";
  std::atomic<bool> multi_got{false};
  std::thread multi([&] {
    Client own(server().url());
    MultiLock both(own, {b, a});
    if (both.try_lock_for(5s)) {
      own.command({"RPUSH", order, "multi"});
      multi_got = true;
      both.unlock();
    }
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(multi_got.load()) << "the MultiLock took b while it was held";
  holder.unlock();  // hands b to the queued waiter
  multi.join();
  waiter.join();
  ASSERT_TRUE(waiter_done.load());
  ASSERT_TRUE(multi_got.load());
  const RawReply list = raw({"LRANGE", order, "0", "-1"});
  ASSERT_EQ(list.elements.size(), 2u);
  EXPECT_EQ(list.elements[0].str, "waiter") << "the MultiLock jumped the queued waiter";
  EXPECT_EQ(list.elements[1].str, "multi");
}

// Free keys whose queue holds an entry (a waiter queued while the holder's
// key expired): the script must not take them; the ordered path then deals
// with the queue as a Lock does (a dead waiter is skipped).
TEST_F(MultiLockScript, AFreeKeyWithAQueueIsLeftToTheLocksQueueing) {
  const std::string base = key("queued");
  const std::string a = base + ":a", b = base + ":b";
  raw({"RPUSH", lock_companion_key(b, "q"), "nobody|1|30000|0|deadbeef"});
  MultiLock both(client(), {a, b});
  ASSERT_TRUE(both.try_lock_for(3s));
  // Taken by the ordered path: a token per key, not the script's one token.
  EXPECT_NE(value(a), value(b)) << "the script took a key that had a queue";
  EXPECT_NE(value(b), "deadbeef") << "the dead waiter's token";
  both.release();
}

TEST_F(MultiLockScript, ThreadsTransferingInBothOrdersConserveMoney) {
  const std::string base = key("bank");
  const std::string a = base + ":a", b = base + ":b", ops = base + ":ops";
  const std::string balance_a = base + ":balance:a", balance_b = base + ":balance:b";
  constexpr int kThreads = 4;
  constexpr int kRounds = 40;
  const long long scripts_before = scripts();
  std::atomic<int> inside{0}, overlaps{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Client own(server().url());
        MultiLock lock(own, t % 2 == 0 ? std::vector<std::string>{a, b} : std::vector<std::string>{b, a});
        for (int i = 0; i < kRounds; ++i) {
          if (!lock.try_lock_for(20s)) {
            failures.fetch_add(1);
            return;
          }
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          const std::string& from = (t + i) % 2 == 0 ? balance_a : balance_b;
          const std::string& to = (t + i) % 2 == 0 ? balance_b : balance_a;
          const long long amount = 1 + (t * 31 + i) % 9;
          auto read = [&](const std::string& name) {
            const Reply reply = own.command({"GET", name});
            return reply.is_nil() ? 0LL : std::stoll(reply.as_string());
          };
          const long long from_balance = read(from), to_balance = read(to), done = read(ops);
          own.command({"SET", from, std::to_string(from_balance - amount)});
          own.command({"SET", to, std::to_string(to_balance + amount)});
          own.command({"SET", ops, std::to_string(done + 1)});
          inside.fetch_sub(1);
          lock.release();
        }
      } catch (const std::exception& e) {
        std::cerr << "thread error: " << e.what() << '\n';
        failures.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(number(balance_a) + number(balance_b), 0) << "money was created or destroyed";
  EXPECT_NE(number(balance_a), 0) << "no money moved";
  EXPECT_EQ(number(ops), kThreads * kRounds);
  EXPECT_GT(scripts() - scripts_before, 0);
  std::cout << "scripts run for " << kThreads * kRounds << " contended cycles: " << scripts() - scripts_before
            << '\n';
}

TEST_F(MultiLockScript, ProcessesTransferingInBothOrdersConserveMoney) {
  const std::string base = key("pbank");
  const std::string a = base + ":a", b = base + ":b";
  constexpr int kRounds = 150;
  std::vector<Child> children;
  for (int p = 0; p < 4; ++p)
    children.push_back(spawn(worker_argv("multi_bank", {server().url(), a, b, std::to_string(kRounds),
                                                        p % 2 == 0 ? "ab" : "ba"})));
  for (Child& child : children) {
    const ProcessResult result = child.wait(60s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  EXPECT_EQ(number(a + ":balance") + number(b + ":balance"), 0) << "money was created or destroyed";
  EXPECT_EQ(number(a + ":ops"), 4 * kRounds);
}

// The server stalls while the script is in flight and the caller's deadline
// passes: the outcome is unknown (the script may run when the server
// resumes). The MultiLock reports false and the clean-up frees whatever
// the script took, long before the 10 s TTL.
TEST_F(MultiLockScript, DeadlinePassingDuringTheScriptLeavesNoKeyHeld) {
  const std::string base = key("stall");
  const std::string a = base + ":a", b = base + ":b", c = base + ":c";
  MultiLock all(client(), {a, b, c}, {.ttl = 10s});
  ASSERT_TRUE(all.try_lock());  // loads the script: the stalled attempt below is one EVALSHA
  all.release();
  server().pause();
  const auto start = Clock::now();
  bool got = true;
  try {
    got = all.try_lock_for(200ms);
  } catch (const Error& e) {
    server().resume();
    FAIL() << "a deadline passing must not throw: " << e.what();
  }
  const long long took = ms_since(start);
  std::this_thread::sleep_for(300ms);
  server().resume();
  EXPECT_FALSE(got);
  EXPECT_FALSE(all.held());
  EXPECT_LT(took, 1000) << "the deadline was not kept";
  const auto resumed = Clock::now();
  for (const std::string& name : {a, b, c})
    EXPECT_TRUE(eventually(3s, [&] { return !exists(name); })) << name << " stayed held after the stalled attempt";
  std::cout << "keys free " << ms_since(resumed) << " ms after the server resumed (ttl 10000 ms)\n";
  ASSERT_TRUE(all.try_lock_for(3s));
  all.release();
}

TEST_F(MultiLockScript, SigkilledScriptHolderFreesEveryKeyWithinTtl) {
  const std::string base = key("kill");
  const std::string a = base + ":a", b = base + ":b", c = base + ":c";
  constexpr long long kTtlMs = 1000;
  const long long before = scripts();
  Child holder = spawn(worker_argv("multi_hold", {server().url(), std::to_string(kTtlMs), c, a, b}));
  ASSERT_TRUE(holder.wait_for_output("acquired", 10s)) << holder.stderr_text();
  EXPECT_EQ(scripts() - before, 1) << "the holder took its 3 keys in one script";
  EXPECT_EQ(value(a), value(b));
  EXPECT_EQ(value(b), value(c));
  holder.kill(SIGKILL);
  const auto killed = Clock::now();
  EXPECT_EQ(holder.wait(5s).signal, SIGKILL);
  MultiLock all(client(), {b, c, a});
  ASSERT_TRUE(all.try_lock_for(5s));
  const long long took = ms_since(killed);
  std::cout << "MultiLock(3 keys, script) after a SIGKILLed script holder: " << took << " ms (ttl " << kTtlMs
            << " ms)\n";
  EXPECT_LE(took, kTtlMs + 200);
  all.release();
}

TEST_F(MultiLockScript, AdoptedKeysAreRenewedAndALostKeyIsReported) {
  const std::string base = key("renew");
  const std::string a = base + ":a", b = base + ":b", c = base + ":c";
  std::atomic<int> lost_calls{0};
  std::mutex mutex;
  std::string detail;
  MultiLock all(client(), {a, b, c}, {.ttl = 600ms, .on_lost = [&](const LossEvent& event) {
                                        const std::lock_guard guard(mutex);
                                        detail = event.detail;
                                        lost_calls.fetch_add(1);
                                      }});
  const long long before = scripts();
  ASSERT_TRUE(all.try_lock());
  EXPECT_EQ(scripts() - before, 1);
  std::this_thread::sleep_for(1500ms);  // 2.5 TTLs: only renewal keeps the keys
  for (const std::string& name : {a, b, c}) {
    EXPECT_TRUE(exists(name)) << name << " was not renewed past its TTL";
    EXPECT_GT(pttl(lock_companion_key(name, "who")), 0) << "the record is renewed with the key";
  }
  EXPECT_FALSE(all.lost());
  EXPECT_TRUE(all.owned());
  raw({"DEL", b});  // stolen: the next renewal finds it gone
  ASSERT_TRUE(eventually(3s, [&] { return all.lost(); }));
  // lost() turns true before the callback runs (on the watchdog's thread):
  // wait for the call, then make sure no second one follows.
  ASSERT_TRUE(eventually(3s, [&] { return lost_calls.load() >= 1; }));
  std::this_thread::sleep_for(700ms);  // more than a renewal period
  EXPECT_EQ(lost_calls.load(), 1);
  {
    const std::lock_guard guard(mutex);
    EXPECT_NE(detail.find(b), std::string::npos) << detail;
  }
  EXPECT_THROW(all.release(), LockNotOwned);
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(exists(c));
}

// Options the script does not serve keep the ordered path: one key,
// replica acknowledgements, a Redlock-style factory backend.
TEST_F(MultiLockScript, OnlyPlainLocksOnOneClientTakeTheScript) {
  const std::string base = key("paths");
  const std::string a = base + ":a", b = base + ":b";
  {
    MultiLock one(client(), {a, a});
    const long long before = scripts();
    ASSERT_TRUE(one.try_lock());
    EXPECT_EQ(scripts(), before) << "one key keeps the Lock's SET NX fast path";
    one.release();
  }
  {
    const Client other(server().url());
    int made = 0;
    const LockFactory mixed = [&](std::string name, LockOptions options) -> std::unique_ptr<DistributedLock> {
      return std::make_unique<Lock>(made++ == 0 ? client() : other, std::move(name), std::move(options));
    };
    MultiLock two_clients({a, b}, {}, mixed);
    const long long before = scripts();
    ASSERT_TRUE(two_clients.try_lock());
    EXPECT_EQ(scripts(), before) << "Locks on different clients must take the ordered path";
    two_clients.release();
  }
  {
    const LockFactory same = [&](std::string name, LockOptions options) -> std::unique_ptr<DistributedLock> {
      return std::make_unique<Lock>(client(), std::move(name), std::move(options));
    };
    MultiLock factory({a, b}, {}, same);
    const long long before = scripts();
    ASSERT_TRUE(factory.try_lock());
    EXPECT_EQ(scripts() - before, 1) << "plain Locks on one client from a factory (lock_on_each) use the script";
    factory.release();
  }
}

}  // namespace
}  // namespace lockon::test
