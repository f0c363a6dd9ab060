// integration/test_lock_subscription.cpp — the life cycle of the process's
// wake-up subscription (issue 4): it exists only while someone waits (plus a
// short linger), goes away when nobody does, and comes back for the next
// waiter without costing it a hand-off.
#include <atomic>
#include <chrono>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Channels subscribed by the server's pub/sub clients, summed ("sub=" fields).
long long subscribed_channels(RawConnection& probe) {
  std::istringstream lines(probe.command({"CLIENT", "LIST", "TYPE", "pubsub"}).str);
  std::string line;
  long long total = 0;
  while (std::getline(lines, line)) {
    const auto at = line.find(" sub=");
    if (at != std::string::npos) total += std::stoll(line.substr(at + 5));
  }
  return total;
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
  const bool queued = eventually(5s, [&] { return probe.command({"LLEN", detail::companion_key(name, "q")}).integer == 1; });
  released_at = Clock::now();
  released = true;
  holder.unlock();
  waiter.join();
  return queued ? acquired_after_ms.load() : -1;
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

}  // namespace
}  // namespace lockon::test
