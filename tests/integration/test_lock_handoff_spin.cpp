// integration/test_lock_handoff_spin.cpp — a waiter expecting its turn soon
// polls its wake-up socket instead of sleeping (LockOptions::handoff_spin,
// src/lock/handoff_spin.hpp). Attacked here: hand-overs caught while
// polling keep exclusion and reach every waiter (also when a second thread
// of the polling process joins and the subscriber thread takes the socket
// over); a holder that stalls does not make its waiters burn CPU for the
// stall; keys that change hands slowly, and handoff_spin = 0, never poll.
#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/test_hooks.hpp"
#include "lock/subscriber.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using detail::Subscriber;

std::chrono::microseconds thread_cpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_nsec / 1000);
}

// Participants in separate Clients (own subscriber each, like processes;
// threads > 1 share one), each locking `cycles` times around a critical
// section that checks nobody else is inside.
struct Churn {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> done{0};
  std::atomic<int> failures{0};

  void run(const std::string& url, const std::string& name, const std::vector<int>& threads_per_client, int cycles,
           LockOptions options, std::chrono::microseconds hold = 0us) {
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<std::thread> threads;
    for (const int n : threads_per_client) {
      clients.push_back(std::make_unique<Client>(url));
      for (int t = 0; t < n; ++t) {
        threads.emplace_back([&, client = clients.back().get()] {
          Lock lock(*client, name, options);
          for (int i = 0; i < cycles; ++i) {
            if (!lock.try_lock_for(20s)) {
              ++failures;
              return;
            }
            if (inside.fetch_add(1) != 0) ++overlaps;
            if (hold.count() > 0) std::this_thread::sleep_for(hold);
            inside.fetch_sub(1);
            lock.unlock();
            ++done;
          }
        });
      }
    }
    for (auto& thread : threads) thread.join();
  }
};

class HandoffSpin : public ClientTest {};

// Three "processes" on one key, one of them with two threads (so its
// subscriber thread and a lone direct reader take turns on the socket, and
// a thread joining while the other polls must be served). The spin bound is
// generous so that sanitizer builds, whose turns are slower, poll too.
TEST_F(HandoffSpin, HandOversCaughtWhilePollingKeepExclusionAndReachEveryWaiter) {
  const std::string name = key("lock");
  const auto polled_before = detail::test_hooks::seen_while_polling.load();
  Churn churn;
  churn.run(server().url(), name, {1, 1, 2}, 150, {.ttl = 10s, .handoff_spin = 20ms});
  EXPECT_EQ(churn.failures.load(), 0);
  EXPECT_EQ(churn.overlaps.load(), 0);
  EXPECT_EQ(churn.done.load(), 4 * 150);
  // Not vacuous: waiters did poll, and hand-overs arrived in their windows.
  EXPECT_GT(detail::test_hooks::seen_while_polling.load() - polled_before, 20u);
  EXPECT_FALSE(exists(name));
}

// A waiter whose estimate says "soon" behind a holder that then keeps the
// lock 600 ms (a stalled or paused holder looks the same from outside):
// it polls for at most handoff_spin, then sleeps. Its thread's CPU time
// over the whole wait shows it (polling the whole stall: ~600 ms).
TEST_F(HandoffSpin, AWaiterBehindAStalledHolderPollsAtMostHandoffSpin) {
  const std::string name = key("lock");
  const LockOptions options{.ttl = 10s, .handoff_spin = 20ms};
  const Client other(server().url());
  Lock holder(client(), name, options);
  std::atomic<int> phase{0};  // 1: warmed up, 2: waiter queued behind the stall
  std::chrono::microseconds waited_cpu{0};
  std::chrono::milliseconds waited_wall{0};
  bool stalled_wait_acquired = false;
  const auto polled_before = detail::test_hooks::seen_while_polling.load();
  std::jthread waiter([&] {
    Lock lock(other, name, options);
    // Warm-up: the two alternate, so this process learns the key's pace,
    // until waiters have polled a few times (bounded by count and time: on
    // a loaded machine 3,000 cycles once saw no poll, session 18).
    const auto warm_until = std::chrono::steady_clock::now() + 8s;
    for (int i = 0; i < 40000 && detail::test_hooks::seen_while_polling.load() - polled_before < 5 &&
                    (i < 3000 || std::chrono::steady_clock::now() < warm_until);
         ++i) {
      if (!lock.try_lock_for(10s)) return;
      lock.unlock();
      std::this_thread::yield();
    }
    phase = 1;
    while (phase.load() != 2) std::this_thread::sleep_for(1ms);
    const auto cpu0 = thread_cpu();
    const auto wall0 = std::chrono::steady_clock::now();
    stalled_wait_acquired = lock.try_lock_for(10s);
    waited_cpu = thread_cpu() - cpu0;
    waited_wall = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - wall0);
    if (stalled_wait_acquired) lock.unlock();
  });
  while (phase.load() != 1) {
    ASSERT_TRUE(holder.try_lock_for(10s));
    holder.unlock();
    std::this_thread::yield();
  }
  ASSERT_TRUE(holder.try_lock_for(10s));
  const auto polled_in_warmup = detail::test_hooks::seen_while_polling.load() - polled_before;
  phase = 2;
  std::this_thread::sleep_for(600ms);
  holder.unlock();
  waiter.join();
  EXPECT_GT(polled_in_warmup, 0u) << "the waiter never polled during the warm-up: the test would prove nothing";
  ASSERT_TRUE(stalled_wait_acquired);
  EXPECT_GE(waited_wall.count(), 500);
  EXPECT_LT(waited_cpu.count(), 150'000) << "waited " << waited_wall.count() << " ms";
}

// Keys that change hands slower than handoff_spin are never polled, and
// handoff_spin = 0 never polls.
TEST_F(HandoffSpin, SlowKeysAndZeroNeverPoll) {
  const auto polled_before = detail::test_hooks::seen_while_polling.load();
  Churn slow;
  slow.run(server().url(), key("slow"), {1, 1}, 15, {.ttl = 10s, .handoff_spin = 1ms}, 3ms);
  Churn off;
  off.run(server().url(), key("off"), {1, 1, 1}, 100, {.ttl = 10s, .handoff_spin = 0us});
  EXPECT_EQ(slow.done.load() + off.done.load(), 2 * 15 + 3 * 100);
  EXPECT_EQ(slow.overlaps.load() + off.overlaps.load(), 0);
  EXPECT_EQ(detail::test_hooks::seen_while_polling.load(), polled_before);
}

}  // namespace
}  // namespace lockon::test
