// integration/test_lock_on_each.cpp — RedisLocker::lock_on_each: each
// selected argument locked as its own entity (the KeyScope::entity key of
// that argument alone), all or nothing; exclusion with lock_on in entity
// scope; per-key fences in the LockContext; reentrancy on request; threads
// and 4 processes running transfer(a, b) / transfer(b, a) with money conserved.
#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockOnEachTest : public ClientTest {
 protected:
  RedisLocker locker(LockerPolicy policy = {}) {
    policy.key_prefix = key("p");
    return RedisLocker(client(), std::move(policy));
  }
};

TEST_F(LockOnEachTest, EachKeyIsTheEntityKeyOfThatArgumentAlone) {
  const RedisLocker l = locker();
  const auto transfer = l.lock_on_each<0, 1>(
      "bank::transfer", [](const std::string&, const std::string&, int amount) { return amount; });
  const std::vector<std::string> keys = transfer.key_for("acct-a", "acct-b", 5);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], l.entity_key_for<0>(std::string("acct-a")));
  EXPECT_EQ(keys[1], l.entity_key_for<0>(std::string("acct-b")));
  EXPECT_EQ(keys[0], entity_lock_key(l.policy().key_prefix, std::string("acct-a")));
  const auto withdraw =
      l.lock_on<0>("bank::withdraw", [](const std::string&, int) {}, {.scope = KeyScope::entity});
  EXPECT_EQ(keys[0], withdraw.key_for("acct-a", 1));
  EXPECT_EQ(transfer("acct-a", "acct-b", 5), 5);
  EXPECT_FALSE(exists(keys[0]));
  EXPECT_FALSE(exists(keys[1]));
}

TEST_F(LockOnEachTest, ExcludesALockOnEntityCallOnEitherArgument) {
  const RedisLocker l = locker({.max_retry = 1, .retry_delay = 0ms});
  const auto transfer = l.try_lock_on_each<0, 1>("bank::transfer",
                                                 [](const std::string&, const std::string&) { return 1; });
  const std::vector<std::string> keys = transfer.key_for("a", "b");
  Lock plain(client(), keys[1]);  // what withdraw("b") in entity scope locks
  ASSERT_TRUE(plain.try_lock());
  EXPECT_EQ(transfer("a", "b"), std::nullopt);
  EXPECT_FALSE(exists(keys[0])) << "all or nothing";
  plain.release();
  EXPECT_EQ(transfer("b", "a"), 1);
}

// issue 35 §8: two arguments naming one entity showed "K,K" as the key,
// and a busy lock_on_each did not say which of its keys was held.
TEST_F(LockOnEachTest, OneEntityIsNamedOnceAndTheBusyKeyIsNamed) {
  const RedisLocker l = locker({.max_retry = 1, .retry_delay = 50ms, .fencing = true});
  std::string seen_key;
  std::uint64_t fence0 = 0;
  std::uint64_t fence1 = 1;
  const auto transfer = l.lock_on_each<0, 1>("bank::transfer", [&](LockContext& context, const std::string&,
                                                                   const std::string&) {
    seen_key = context.key();
    fence0 = context.fence(0);
    fence1 = context.fence(1);
  });
  const std::vector<std::string> keys = transfer.key_for("same", "same");
  ASSERT_EQ(keys.size(), 2u);
  transfer("same", "same");
  EXPECT_EQ(seen_key, keys[0]) << "one entity, one key";
  EXPECT_NE(fence0, 0u);
  EXPECT_EQ(fence0, fence1) << "both positions name the same key";

  const std::vector<std::string> pair = transfer.key_for("x", "y");
  Lock plain(client(), pair[1]);
  ASSERT_TRUE(plain.try_lock());
  try {
    transfer("x", "y");
    ADD_FAILURE() << "the second key is held";
  } catch (const RetriesExhausted& e) {
    EXPECT_NE(std::string(e.what()).find("busy: '" + pair[1] + "'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("busy: '" + pair[0] + "'"), std::string::npos) << e.what();
  }
  plain.release();
}

TEST_F(LockOnEachTest, ContextGivesAFencePerArgumentKey) {
  const RedisLocker l = locker({.fencing = true});
  std::uint64_t first_a = 0;
  const auto transfer = l.lock_on_each<0, 1>("bank::transfer", [&](LockContext& context, const std::string& from,
                                                                   const std::string& /*to*/) {
    EXPECT_NE(context.fence(0), 0u);
    EXPECT_NE(context.fence(1), 0u);
    EXPECT_THROW((void)context.fence(2), std::out_of_range);
    EXPECT_EQ(context.attempts(), 1);
    return from == "a" ? context.fence(0) : context.fence(1);  // a's fence
  });
  first_a = transfer("a", "b");
  const std::uint64_t second_a = transfer("b", "a");
  EXPECT_GT(second_a, first_a);
}

TEST_F(LockOnEachTest, ReentrantNestedCallRunsAtOnceOnlyWhenRequested) {
  const RedisLocker l = locker({.max_retry = 0, .retry_delay = 100ms, .timeout = 400ms});
  const auto deposit_reentrant =
      l.lock_on<0>("bank::deposit", [](LockContext& context, const std::string&) { return context.attempts(); },
                   {.scope = KeyScope::entity, .reentrant = true});
  const auto deposit_plain = l.lock_on<0>("bank::deposit", [](const std::string&) { return 1; },
                                          {.scope = KeyScope::entity});
  const auto transfer_reentrant = l.lock_on_each<0, 1>(
      "bank::transfer", [](const std::string&, const std::string&) { return 7; }, {.reentrant = true});

  // Nested, reentrant: runs at once under the enclosing lock (attempts 0).
  const auto outer = l.lock_on_each<0, 1>("bank::transfer", [&](const std::string& from, const std::string& to) {
    const auto start = Clock::now();
    const int nested_attempts = deposit_reentrant(to);
    const int both = transfer_reentrant(to, from);  // every key held: no acquisition
    EXPECT_LT(ms_since(start), 200);
    return nested_attempts * 100 + both;
  });
  EXPECT_EQ(outer("a", "b"), 7);

  // Not reentrant (the default): the nested call fails at once, saying the
  // calling thread holds the key (it used to wait for itself until the
  // policy's deadline and report "held by another owner").
  const auto transfer_plain =
      l.lock_on_each<0, 1>("bank::transfer", [](const std::string&, const std::string&) { return 7; });
  const auto try_deposit_plain = l.try_lock_on<0>(
      "bank::deposit", [](const std::string&) { return 1; }, {.scope = KeyScope::entity});
  const auto outer_plain = l.lock_on<0>(
      "bank::audit",
      [&](const std::string& account) {
        const auto start = Clock::now();
        try {
          deposit_plain(account);
          ADD_FAILURE() << "a nested non-reentrant call ran";
        } catch (const HeldByThisThread& e) {
          EXPECT_NE(std::string(e.what()).find("calling thread"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("reentrant"), std::string::npos) << e.what();
        }
        EXPECT_FALSE(try_deposit_plain(account).has_value()) << "try_lock_on: busy, at once";
        EXPECT_THROW(transfer_plain("zz", account), HeldByThisThread) << "lock_on_each: one key held here";
        EXPECT_LT(ms_since(start), 200) << "waited for itself";
      },
      {.scope = KeyScope::entity});
  outer_plain("a");
  // After the calls nothing is held and a plain call succeeds.
  EXPECT_EQ(deposit_plain("a"), 1);
}

TEST_F(LockOnEachTest, ThreadsTransferBothWaysMoneyConserved) {
  const RedisLocker l = locker({.max_retry = 0, .retry_delay = 1s, .timeout = 20s});
  const std::string a = key("acct-a");
  const std::string b = key("acct-b");
  raw({"SET", a, "1000"});
  raw({"SET", b, "1000"});
  const auto transfer = l.lock_on_each<0, 1>("bank::transfer", [&](const std::string& from, const std::string& to) {
    Client& c = client();
    const long long f = std::stoll(c.command({"GET", from}).as_string());
    const long long t = std::stoll(c.command({"GET", to}).as_string());
    c.command({"SET", from, std::to_string(f - 1)});
    c.command({"SET", to, std::to_string(t + 1)});
  });
  constexpr int kThreads = 4;
  constexpr int kCalls = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kCalls; ++i) {
          if (t % 2 == 0) transfer(a, b);
          else transfer(b, a);
        }
      } catch (const std::exception& e) {
        std::cerr << "thread error: " << e.what() << '\n';
        failures.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(value(a), "1000");  // as many a->b as b->a
  EXPECT_EQ(value(b), "1000");
}

// The ordered path holds a while it waits for b. Without renewal and with a
// ttl (300 ms) shorter than that wait (b is held for 1 s), a's lease is long
// gone when b comes: a may have had another holder meanwhile, so fn must not
// start on it. Before the fix it did: fn started with context.lost() already
// true and the LockLost came only after fn had run (review, session 21).
// Now the stale grant is given back and the attempt taken again within its
// window, with fresh leases on both keys.
TEST_F(LockOnEachTest, AKeyWhoseLeaseEndedWhileALaterOneWasAwaitedNeverStartsTheFunction) {
  const RedisLocker l =
      locker({.max_retry = 1, .retry_delay = 3s, .timeout = 5s, .ttl = 300ms, .auto_renew = false});
  const std::string key_a = l.entity_key_for<0>(std::string("a"));
  const std::string key_b = l.entity_key_for<0>(std::string("b"));
  ASSERT_LT(key_a, key_b) << "a must be the key taken first";
  std::atomic<int> starts{0};
  std::atomic<int> starts_on_a_lost_lease{0};
  const auto transfer = l.lock_on_each<0, 1>(
      "bank::transfer", [&](LockContext& context, const std::string&, const std::string&) {
        starts.fetch_add(1);
        if (context.lost()) starts_on_a_lost_lease.fetch_add(1);
      });
  Lock holder_of_b(client(), key_b);
  ASSERT_TRUE(holder_of_b.try_lock());
  std::thread release_b_later([&] {
    std::this_thread::sleep_for(1s);
    holder_of_b.unlock();
  });
  const auto start = Clock::now();
  try {
    transfer("a", "b");
  } catch (const LockLost& e) {
    ADD_FAILURE() << "fn ran on a lost lease: " << e.what();
  }
  release_b_later.join();
  EXPECT_EQ(starts_on_a_lost_lease.load(), 0);
  EXPECT_EQ(starts.load(), 1) << "retried within the window once b was free";
  EXPECT_GE(ms_since(start), 900);
  EXPECT_FALSE(exists(key_a));
  EXPECT_FALSE(exists(key_b));
}

long long count_after(const std::string& out, const std::string& word) {
  std::istringstream in(out);
  std::string token;
  while (in >> token)
    if (token == word && in >> token) return std::stoll(token);
  return -1;
}

TEST_F(LockOnEachTest, FourProcessesTransferBothWaysFor30Seconds) {
  constexpr int kProcesses = 4;
  constexpr int kSeconds = 30;
  const std::string prefix = key("bank");
  const std::string a = prefix + ":a";
  const std::string b = prefix + ":b";
  raw({"SET", a, "100000"});
  raw({"SET", b, "100000"});
  std::vector<Child> workers;
  for (int p = 0; p < kProcesses; ++p) {
    workers.push_back(spawn(worker_argv(
        "multi_transfer", {server().url(), prefix, std::to_string(kSeconds), p % 2 == 1 ? "1" : "0"})));
  }
  long long transfers = 0;
  long long deposits = 0;
  for (auto& worker : workers) {
    // 30 s of calls plus the last call's deadline (20 s) at most.
    const ProcessResult result = worker.wait(std::chrono::seconds(kSeconds + 30));
    ASSERT_TRUE(result.succeeded()) << result.describe();
    const long long t = count_after(result.out, "transfers");
    const long long d = count_after(result.out, "deposits");
    ASSERT_GT(t, 0) << result.out;
    ASSERT_GT(d, 0) << result.out;
    transfers += t;
    deposits += d;
  }
  std::cout << kProcesses << " processes, " << kSeconds << " s: " << transfers << " transfers, " << deposits
            << " deposits\n";
  // Every process ran as many a->b as b->a transfers up to one per thread
  // pair; the sum is what is conserved exactly, plus every deposit to a.
  const long long total = std::stoll(value(a)) + std::stoll(value(b));
  EXPECT_EQ(total, 200000 + deposits);
}

}  // namespace
}  // namespace lockon::test
