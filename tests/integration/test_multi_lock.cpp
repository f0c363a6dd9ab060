// integration/test_multi_lock.cpp — lockon::MultiLock: all or nothing,
// exclusion with plain Locks on each key, exact counters under thread
// contention in both key orders, per-key fences, a shared deadline, a lost
// key signalled, and a SIGKILLed holder freeing every key within its TTL.
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "redlock_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class MultiLockTest : public ClientTest {};

TEST_F(MultiLockTest, AllOrNothingAgainstAPlainLockOnOneKey) {
  const std::string a = key("a");
  const std::string b = key("b");
  Lock plain(client(), a);
  ASSERT_TRUE(plain.try_lock());
  MultiLock both(client(), {b, a});
  EXPECT_FALSE(both.try_lock());
  EXPECT_FALSE(both.held());
  EXPECT_FALSE(exists(b)) << "a failed MultiLock must not keep the keys it took";
  plain.release();

  ASSERT_TRUE(both.try_lock());
  EXPECT_TRUE(exists(a));
  EXPECT_TRUE(exists(b));
  EXPECT_TRUE(both.owned());
  Lock plain_b(client(), b);
  EXPECT_FALSE(plain_b.try_lock()) << "a plain Lock on a key of a held MultiLock must be excluded";
  EXPECT_EQ(both.keys(), (a < b ? std::vector<std::string>{a, b} : std::vector<std::string>{b, a}));  // sorted
  both.release();
  EXPECT_FALSE(exists(a));
  EXPECT_FALSE(exists(b));
  EXPECT_TRUE(plain_b.try_lock());
  plain_b.release();
}

TEST_F(MultiLockTest, WorksWithStdScopedLockAndDuplicates) {
  const std::string a = key("a");
  MultiLock twice(client(), {a, a}, {.fencing = true});
  {
    const std::scoped_lock guard(twice);
    EXPECT_TRUE(twice.held());
    EXPECT_EQ(twice.size(), 2u);
    EXPECT_EQ(twice.keys().size(), 1u);
    EXPECT_EQ(twice.fence(0), twice.fence(1));
    EXPECT_NE(twice.fence(0), 0u);
  }
  EXPECT_FALSE(twice.held());
  EXPECT_FALSE(exists(a));
  EXPECT_THROW(MultiLock(client(), {}), ConfigError);
  EXPECT_THROW(MultiLock(client(), {a, ""}), ConfigError);
  EXPECT_THROW(twice.fence(2), std::out_of_range);
}

TEST_F(MultiLockTest, FencesArePerKeyAndIncreaseAcrossPlainAndMultiHolders) {
  const std::string a = key("a");
  const std::string b = key("b");
  Lock plain(client(), a, {.fencing = true});
  ASSERT_TRUE(plain.try_lock());
  const std::uint64_t plain_fence = plain.fence();
  plain.release();
  MultiLock both(client(), {b, a}, {.fencing = true});
  std::uint64_t last_a = plain_fence;
  std::uint64_t last_b = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(both.try_lock());
    // fence(i) follows the constructor order: 0 is b, 1 is a.
    EXPECT_GT(both.fence(1), last_a);
    EXPECT_GT(both.fence(0), last_b);
    EXPECT_EQ(both.fences(), (std::vector<std::uint64_t>{both.fence(0), both.fence(1)}));
    EXPECT_EQ(both.fence(), both.fence(0));
    last_a = both.fence(1);
    last_b = both.fence(0);
    both.release();
  }
  ASSERT_TRUE(plain.try_lock());
  EXPECT_GT(plain.fence(), last_a);
  plain.release();
}

TEST_F(MultiLockTest, TimeoutIsSharedAndReleasesTheKeysTaken) {
  const std::string a = key("a");
  const std::string b = key("b");
  Lock plain(client(), b);
  ASSERT_TRUE(plain.try_lock());
  MultiLock both(client(), {a, b});
  const auto start = Clock::now();
  EXPECT_FALSE(both.try_lock_for(300ms));
  const long long took = ms_since(start);
  EXPECT_GE(took, 290);
  EXPECT_LT(took, 800);
  EXPECT_FALSE(exists(a)) << "the key taken before the timeout must be released";
  plain.release();
}

TEST_F(MultiLockTest, ThreadsInBothOrdersCountExactly) {
  const std::string x = key("x");
  const std::string y = key("y");
  const std::string cx = key("count-x");
  const std::string cy = key("count-y");
  constexpr int kThreads = 4;
  constexpr int kIterations = 25;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Client own(server().url());
        MultiLock lock(own, t % 2 == 0 ? std::vector<std::string>{x, y} : std::vector<std::string>{y, x});
        for (int i = 0; i < kIterations; ++i) {
          if (!lock.try_lock_for(20s)) {
            failures.fetch_add(1);
            return;
          }
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          for (const std::string* counter : {&cx, &cy}) {
            const Reply value = own.command({"GET", *counter});
            const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
            own.command({"SET", *counter, std::to_string(next)});
          }
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
  EXPECT_EQ(value(cx), std::to_string(kThreads * kIterations));
  EXPECT_EQ(value(cy), std::to_string(kThreads * kIterations));
}

TEST_F(MultiLockTest, LosingOneKeyDeclaresTheWholeLockLost) {
  const std::string a = key("a");
  const std::string b = key("b");
  std::atomic<int> calls{0};
  std::string lost_detail;
  std::mutex mutex;
  MultiLock both(client(), {a, b},
                 {.ttl = 600ms, .on_lost = [&](const LossEvent& event) {
                    const std::lock_guard guard(mutex);
                    lost_detail = event.detail;
                    calls.fetch_add(1);
                  }});
  ASSERT_TRUE(both.try_lock());
  const std::stop_token token = both.lost_token();
  raw({"DEL", b});  // stolen from under us: the next renewal (ttl/3) finds it gone
  ASSERT_TRUE(eventually(3s, [&] { return both.lost(); }));
  // lost() turns true first; the stop request and the callback follow on
  // the watchdog's thread (seen apart once in CI's ASan stage).
  EXPECT_TRUE(eventually(2s, [&] { return token.stop_requested() && calls.load() >= 1; }));
  std::this_thread::sleep_for(300ms);  // a renewal period: no second call
  EXPECT_EQ(calls.load(), 1);
  {
    const std::lock_guard guard(mutex);
    EXPECT_NE(lost_detail.find(b), std::string::npos) << lost_detail;
  }
  EXPECT_THROW(both.release(), LockNotOwned);
  EXPECT_FALSE(both.held());
  EXPECT_FALSE(exists(a)) << "the other key is released even though one was lost";
}

// Without renewal the keys' leases simply end; that end reaches the
// MultiLock like any key's loss (through each key's on_lost): stop
// requested and on_lost called once, within ~100 ms of the ttl. Written
// with the fix of LockRenewal.WithoutRenewalTheLeaseEndRequestsStopAndCallsOnLost
// (session 21); before it no key signalled its end, so neither did this.
TEST_F(MultiLockTest, WithoutRenewalTheKeysLeaseEndStopsTheWholeLock) {
  std::atomic<int> calls{0};
  MultiLock both(client(), {key("a"), key("b")},
                 {.ttl = 200ms, .auto_renew = false, .on_lost = [&](const LossEvent&) { calls.fetch_add(1); }});
  const auto before_acquiring = Clock::now();
  ASSERT_TRUE(both.try_lock());
  const std::stop_token token = both.lost_token();
  while (ms_since(before_acquiring) < 400 && !token.stop_requested()) std::this_thread::sleep_for(2ms);
  const long long stopped_after_ms = ms_since(before_acquiring);
  EXPECT_TRUE(token.stop_requested());
  EXPECT_GE(stopped_after_ms, 200);
  EXPECT_LE(stopped_after_ms, 300);
  EXPECT_TRUE(eventually(1s, [&] { return calls.load() >= 1; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 1) << "the second key's end is the same loss";
  both.unlock();
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(MultiLockTest, SigkilledHolderFreesEveryKeyWithinTtl) {
  const std::string a = key("a");
  const std::string b = key("b");
  const std::string c = key("c");
  constexpr long long kTtlMs = 1000;
  Child holder = spawn(worker_argv("multi_hold", {server().url(), std::to_string(kTtlMs), c, a, b}));
  ASSERT_TRUE(holder.wait_for_output("acquired", 10s)) << holder.stderr_text();
  holder.kill(SIGKILL);
  const auto killed = Clock::now();
  EXPECT_EQ(holder.wait(5s).signal, SIGKILL);
  MultiLock all(client(), {b, c, a});
  ASSERT_TRUE(all.try_lock_for(5s));
  const long long took = ms_since(killed);
  std::cout << "MultiLock(3 keys) after a SIGKILLed holder: " << took << " ms (ttl " << kTtlMs << " ms)\n";
  EXPECT_LE(took, kTtlMs + 200);
  all.release();
}

class MultiLockRedlock : public RedlockServers {};

TEST_F(MultiLockRedlock, OverRedlockBackendsAllOrNothing) {
  start(3);
  std::vector<Client> nodes;
  for (const std::string& url : urls()) nodes.emplace_back(url);
  const LockFactory redlock = [&nodes](std::string key, LockOptions options) -> std::unique_ptr<DistributedLock> {
    return std::make_unique<Redlock>(nodes, std::move(key), std::move(options));
  };
  Redlock plain(nodes, "acct:b");
  ASSERT_TRUE(plain.try_lock());
  MultiLock both({"acct:b", "acct:a"}, {}, redlock);
  EXPECT_FALSE(both.try_lock());
  EXPECT_EQ(holders_settled("acct:a", 0), 0) << "all or nothing over Redlock too";
  plain.release();
  ASSERT_TRUE(both.try_lock());
  EXPECT_EQ(holders_settled("acct:a", 3), 3);
  EXPECT_EQ(holders_settled("acct:b", 3), 3);
  Redlock other(nodes, "acct:a");
  EXPECT_FALSE(other.try_lock());
  both.release();
  EXPECT_EQ(holders_settled("acct:a", 0), 0);
  EXPECT_EQ(holders_settled("acct:b", 0), 0);
}

}  // namespace
}  // namespace lockon::test
