// integration/test_lock_subscription.cpp — the life cycle of the process's
// wake-up subscription (issue 4): it exists only while someone waits (plus a
// short linger), goes away when nobody does, and comes back for the next
// waiter without costing it a hand-off.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Channels subscribed by the server's pub/sub clients, summed.
long long subscribed_channels(RawConnection& probe) {
  long long total = 0;
  for (const auto& line : pubsub_clients(probe)) total += std::max(0LL, subscriptions(line));
  return total;
}

// Waits (bounded) until `n` waiters are queued for lock `name`.
bool queued(RawConnection& probe, const std::string& name, long long n) {
  return eventually(5s, [&] { return probe.command({"LLEN", detail::companion_key(name, "q")}).integer == n; });
}

// One waiter that queues behind `holder` and is handed the lock by its
// release. Returns the milliseconds from release to acquisition, or -1.
long long handed_over_ms(const Client& client, Lock& holder, RawConnection& probe, const std::string& name) {
  if (!holder.try_lock()) return -1;
  std::atomic<long long> acquired_after_ms{-1};
  std::atomic<bool> released{false};
  Clock::time_point released_at;
  std::thread waiter([&] {
    // A 30 s poll: only the release's message can wake it in time.
    Lock lock(client, name, {.wait_poll_interval = 30s});
    if (lock.try_lock_for(10s)) {
      while (!released) std::this_thread::yield();
      acquired_after_ms = ms_since(released_at);
    }
  });
  const bool in_line = queued(probe, name, 1);
  released_at = Clock::now();
  released = true;
  holder.unlock();
  waiter.join();
  return in_line ? acquired_after_ms.load() : -1;
}

class LockSubscription : public RedisTest {};

TEST_F(LockSubscription, IsDroppedWhenNobodyWaitsAndRestoredForTheNextWaiter) {
  RedisServer own;  // no other test's subscribers in CLIENT LIST
  RawConnection probe = own.connect();
  const Client client(own.url());
  const std::string name = key("lock");
  Lock holder(client, name);

  EXPECT_EQ(subscribed_channels(probe), 0) << "subscribed before anyone waited";
  const long long first = handed_over_ms(client, holder, probe, name);
  ASSERT_GE(first, 0) << "the first waiter was not handed the lock";
  EXPECT_LT(first, 1000);

  // The linger (1 s) plus the subscriber thread's idle poll (1 s) bound
  // how long the subscription outlives the last waiter.
  const auto idle_since = Clock::now();
  ASSERT_TRUE(eventually(5s, [&] { return subscribed_channels(probe) == 0; }))
      << "still subscribed " << ms_since(idle_since) << " ms after the last waiter left";
  std::cout << "unsubscribed " << ms_since(idle_since) << " ms after the last waiter left\n";

  const long long second = handed_over_ms(client, holder, probe, name);
  ASSERT_GE(second, 0) << "the waiter after the unsubscribe was not handed the lock";
  EXPECT_LT(second, 1000) << "the hand-off fell back to polling";
  EXPECT_EQ(probe.command({"DBSIZE"}).integer, 0);  // no lock or queue key left behind
}

// Two waiters of one process share its subscription: the background thread
// reads for both. When the first is served, the second becomes the lone
// waiter and must take over reading at once, not at its next poll (30 s).
TEST_F(LockSubscription, SecondWaiterOfAProcessIsHandedTheLockAfterTheFirstLeaves) {
  const Client client(server().url());
  const std::string name = key("lock");
  Lock holder(client, name);
  ASSERT_TRUE(holder.try_lock());
  RawConnection probe = server().connect();
  std::atomic<long long> first_ns{0};
  std::atomic<long long> second_ns{0};
  const auto stamp = [](std::atomic<long long>& into) {
    into = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  };
  std::jthread first([&] {
    Lock lock(client, name, {.wait_poll_interval = 30s});
    if (!lock.try_lock_for(10s)) return;
    stamp(first_ns);
    // The second waiter is alone now; past the background thread's idle
    // poll (1 s) it has stopped reading for it.
    std::this_thread::sleep_for(1300ms);
    lock.unlock();
  });
  ASSERT_TRUE(queued(probe, name, 1));
  std::thread second([&] {
    Lock lock(client, name, {.wait_poll_interval = 30s});
    if (lock.try_lock_for(10s)) stamp(second_ns);
  });
  const bool both_queued = queued(probe, name, 2);
  holder.unlock();
  first.join();
  second.join();
  ASSERT_TRUE(both_queued);
  ASSERT_NE(first_ns.load(), 0) << "the first waiter was not served";
  ASSERT_NE(second_ns.load(), 0) << "the second waiter was not served";
  const long long gap_ms = (second_ns.load() - first_ns.load()) / 1'000'000;
  std::cout << "second waiter served " << gap_ms << " ms after the first (1300 ms hold)\n";
  EXPECT_LT(gap_ms, 2300) << "the second waiter's hand-off waited for its poll";
}

// A process's lone waiter reads its subscription itself. A second waiter of
// the same process, on another lock, must still hear of its hand-off
// promptly, also after the first stopped reading (its 100 ms polls make it
// leave and retry; with two waiters it then sleeps and the background thread
// reads).
TEST_F(LockSubscription, WaiterJoiningADirectReaderIsHandedItsLockPromptly) {
  const Client client(server().url());
  const std::string slow = key("slow");
  const std::string fast = key("fast");
  Lock slow_holder(client, slow);
  Lock fast_holder(client, fast);
  ASSERT_TRUE(slow_holder.try_lock());
  ASSERT_TRUE(fast_holder.try_lock());
  RawConnection probe = server().connect();
  std::atomic<bool> slow_served{false};
  std::jthread reader([&] {  // alone at first: reads directly
    Lock lock(client, slow, {.wait_poll_interval = 100ms});
    slow_served = lock.try_lock_for(10s);
  });
  ASSERT_TRUE(queued(probe, slow, 1));
  std::atomic<long long> fast_after_ms{-1};
  Clock::time_point released_at;
  std::atomic<bool> released{false};
  std::thread joiner([&] {
    Lock lock(client, fast, {.wait_poll_interval = 30s});
    if (!lock.try_lock_for(10s)) return;
    while (!released) std::this_thread::yield();
    fast_after_ms = ms_since(released_at);
  });
  const bool fast_queued = queued(probe, fast, 1);
  std::this_thread::sleep_for(500ms);  // the first waiter polled a few times
  released_at = Clock::now();
  released = true;
  fast_holder.unlock();
  joiner.join();
  slow_holder.unlock();
  reader.join();
  ASSERT_TRUE(fast_queued);
  EXPECT_TRUE(slow_served.load());
  ASSERT_GE(fast_after_ms.load(), 0) << "the joining waiter was not served";
  std::cout << "joining waiter served " << fast_after_ms.load() << " ms after its release\n";
  EXPECT_LT(fast_after_ms.load(), 250) << "nobody read the joining waiter's hand-off";
}

// A lone waiter whose subscription dropped sleeps until it is back; once the
// server confirms it, the waiter must read directly again (the background
// thread leaves a lone waiter's socket to it), not wait for its 5 s poll.
TEST_F(LockSubscription, LoneWaiterHearsItsHandOffAfterTheSubscriptionReturns) {
  RedisServer own;  // no other test's subscribers to kill or count
  RawConnection probe = own.connect();
  const Client client(own.url());
  const std::string name = key("lock");
  Lock holder(client, name);
  ASSERT_TRUE(holder.try_lock());
  std::atomic<long long> served_after_ms{-1};
  Clock::time_point released_at;
  std::atomic<bool> released{false};
  std::thread waiter([&] {
    Lock lock(client, name, {.wait_poll_interval = 5s});
    if (!lock.try_lock_for(10s)) return;
    while (!released) std::this_thread::yield();
    served_after_ms = ms_since(released_at);
  });
  const bool in_line = queued(probe, name, 1);
  const long long killed = probe.command({"CLIENT", "KILL", "TYPE", "pubsub"}).integer;
  const bool back = eventually(3s, [&] { return subscribed_channels(probe) == 1; });
  std::this_thread::sleep_for(100ms);  // the waiter has retried and sleeps again
  released_at = Clock::now();
  released = true;
  holder.unlock();
  waiter.join();
  ASSERT_TRUE(in_line);
  EXPECT_EQ(killed, 1);
  ASSERT_TRUE(back) << "the subscription did not come back";
  ASSERT_GE(served_after_ms.load(), 0) << "the waiter was not served";
  std::cout << "served " << served_after_ms.load() << " ms after the release\n";
  EXPECT_LT(served_after_ms.load(), 1000) << "the hand-off waited for the waiter's poll";
}

}  // namespace
}  // namespace lockon::test
