// integration/test_lock_requeue_faults.cpp — the "contended, so queue
// directly" memory of a Lock (lock.cpp queue_directly(), 500 ms) under a
// server restart and a stall: the queue path must behave like the fast path
// (a free key is taken at once, errors are typed, nothing stays stranded).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockRequeueFaults : public ClientTest {
 protected:
  // `waiter` acquires `name` after waiting behind `holder` (100 ms): its
  // next acquisition within 500 ms goes straight to the queue script.
  void contend(Lock& holder, Lock& waiter) {
    ASSERT_TRUE(holder.try_lock());
    std::thread release([&] {
      std::this_thread::sleep_for(100ms);
      holder.unlock();
    });
    const bool got = waiter.try_lock_for(5s);
    release.join();
    ASSERT_TRUE(got);
    waiter.unlock();
  }
};

// Restarted (empty) right after a contended acquisition: the queue path
// takes the free key at once on the new server.
TEST_F(LockRequeueFaults, QueuePathAfterARestartTakesTheFreeKeyAtOnce) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 5s}), waiter(client(), name, {.ttl = 5s});
  contend(holder, waiter);
  server().restart();
  raw_ = std::make_unique<RawConnection>(server().connect());
  // The first call may meet the dead pooled connection: a typed error, once.
  bool got = false;
  const auto start = Clock::now();
  for (int i = 0; i < 3 && !got; ++i) {
    try {
      got = waiter.try_lock_for(300ms);
    } catch (const IoError&) {
    }
  }
  ASSERT_TRUE(got) << "the requeued lock could not take a free key after the restart";
  EXPECT_LT(ms_since(start), 400);
  EXPECT_TRUE(waiter.owned());
  waiter.unlock();
  EXPECT_FALSE(exists(name));
}

// Stalled (SIGSTOP, 300 ms) while a requeued lock waits behind a holder
// that releases during the stall: the waiter gets the key once the server
// is back, within its deadline, and no key or queue entry is left behind.
TEST_F(LockRequeueFaults, QueuePathSurvivesAStall) {
  const std::string name = key("lock");
  const Client fast(server().url() + "?socket_timeout=2s");
  Lock holder(fast, name, {.ttl = 5s}), waiter(fast, name, {.ttl = 5s});
  contend(holder, waiter);
  ASSERT_TRUE(holder.try_lock());
  bool got = false;
  std::thread wait([&] { got = waiter.try_lock_for(3s); });
  std::this_thread::sleep_for(50ms);
  server().pause();
  std::thread release([&] { holder.unlock(); });  // sent into the stall
  std::this_thread::sleep_for(300ms);
  server().resume();
  release.join();
  wait.join();
  EXPECT_EQ(holder.last_unlock_error(), nullptr);
  ASSERT_TRUE(got) << "the requeued waiter missed the release made during the stall";
  waiter.unlock();
  EXPECT_FALSE(exists(name));
}

}  // namespace
}  // namespace lockon::test
