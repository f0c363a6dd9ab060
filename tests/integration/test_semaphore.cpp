// integration/test_semaphore.cpp — lockon::Semaphore (issue 16): never more
// than N holders (threads and processes), FIFO hand-over of freed permits,
// renewal, and a SIGKILLed holder whose permit comes back with its TTL.
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/semaphore.hpp"
#include "lockon/shared_lease.hpp"
#include "shared_lease_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class SemaphoreTest : public ClientTest {
 protected:
  void SetUp() override {
    ClientTest::SetUp();
    if (HasFatalFailure()) return;
    pooled_ = std::make_unique<Client>(server().url(), PoolOptions{.size = 16, .wait_timeout = 10s});
  }
  Client& pooled() { return *pooled_; }
  long long holders(const std::string& name) { return raw({"ZCARD", detail::companion_key(name, "sh")}).integer; }
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "sq")}).integer; }

  std::unique_ptr<Client> pooled_;
};

TEST_F(SemaphoreTest, AtMostNPermitsAreHeld) {
  const std::string name = key("sem");
  Semaphore a(client(), name, 2), b(client(), name, 2), c(client(), name, 2);
  EXPECT_TRUE(a.try_acquire());
  EXPECT_TRUE(b.try_acquire_for(1s));
  EXPECT_FALSE(c.try_acquire());
  EXPECT_FALSE(c.try_acquire_for(50ms));
  EXPECT_EQ(queued(name), 0) << "a waiter that gave up left its queue place";
  EXPECT_EQ(holders(name), 2);
  a.release();
  EXPECT_FALSE(a.held());
  EXPECT_TRUE(c.try_acquire());
  {
    std::unique_lock<Semaphore> guard(a, std::try_to_lock);
    EXPECT_FALSE(guard.owns_lock());
  }
  b.release();
  c.release();
  EXPECT_EQ(raw({"EXISTS", detail::companion_key(name, "sh")}).integer, 0);
}

// A permit not renewed simply ends at its ttl; that end is signalled like
// a failed renewal: lost_token() stopped and on_lost called within ~100 ms.
// Fails before (session 21): a non-renewing permit was never shown to the
// watchdog, so only lost() turned true, for whoever polled it.
TEST_F(SemaphoreTest, WithoutRenewalThePermitsEndRequestsStopAndCallsOnLost) {
  std::atomic<int> calls{0};
  Semaphore semaphore(client(), key("sem"), 2,
                      {.ttl = 200ms, .auto_renew = false, .on_lost = [&](const LossEvent&) { calls.fetch_add(1); }});
  const auto before_acquiring = std::chrono::steady_clock::now();
  ASSERT_TRUE(semaphore.try_acquire());
  const std::stop_token token = semaphore.lost_token();
  while (ms_since(before_acquiring) < 400 && !token.stop_requested()) std::this_thread::sleep_for(2ms);
  const long long stopped_after_ms = ms_since(before_acquiring);
  EXPECT_TRUE(semaphore.lost());
  EXPECT_TRUE(token.stop_requested());
  EXPECT_GE(stopped_after_ms, 200);
  EXPECT_LE(stopped_after_ms, 300);
  EXPECT_TRUE(eventually(1s, [&] { return calls.load() == 1; }));
  semaphore.release();
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(SemaphoreTest, MisuseIsReported) {
  const std::string name = key("sem");
  EXPECT_THROW(Semaphore(client(), name, 0), ConfigError);
  EXPECT_THROW(Semaphore(client(), name, 1, {.wait_poll_interval = 0ms}), ConfigError);
  Semaphore semaphore(client(), name, 3);
  EXPECT_THROW(semaphore.release_or_throw(), LockError);
  semaphore.release();  // no-op, never throws
  semaphore.acquire();
  EXPECT_THROW(semaphore.acquire(), LockError) << "one permit per object";
  semaphore.release();
}

TEST_F(SemaphoreTest, FreedPermitsGoToWaitersInArrivalOrder) {
  const std::string name = key("sem");
  Semaphore holder(client(), name, 1, {.wait_poll_interval = 10s});
  holder.acquire();
  std::mutex mutex;
  std::vector<int> order;
  Crew waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.run(1, [&, i](int) {
      Semaphore semaphore(pooled(), name, 1, {.wait_poll_interval = 10s});
      if (!semaphore.try_acquire_for(10s)) throw std::runtime_error("timed out");
      {
        const std::lock_guard guard(mutex);
        order.push_back(i);
      }
      std::this_thread::sleep_for(5ms);
    });
    ASSERT_TRUE(eventually(5s, [&] { return queued(name) == i + 1; }));
  }
  const auto released = Clock::now();
  holder.release();
  waiters.join();
  EXPECT_EQ(waiters.errors(), "");
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  // Four hand-overs with 5 ms holds: well under one poll interval (10 s).
  std::cout << "4 hand-overs: " << ms_since(released) << " ms\n";
  EXPECT_LT(ms_since(released), 1000);
}

TEST_F(SemaphoreTest, EightThreadsNeverMoreThanThreeInside) {
  const std::string name = key("sem");
  constexpr int kPermits = 3, kThreads = 8, kRounds = 60;
  std::atomic<int> inside{0}, peak{0}, violations{0};
  Crew crew;
  crew.run(kThreads, [&](int) {
    Semaphore semaphore(pooled(), name, kPermits, {.ttl = 10s});
    for (int round = 0; round < kRounds; ++round) {
      if (!semaphore.try_acquire_for(30s)) throw std::runtime_error("timed out");
      const int now_inside = ++inside;
      raise_peak(peak, now_inside);
      if (now_inside > kPermits) ++violations;
      std::this_thread::sleep_for(300us);
      --inside;
      semaphore.release();
    }
  });
  crew.join();
  EXPECT_EQ(crew.errors(), "");
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(peak.load(), kPermits) << "permits were never all in use at once";
  EXPECT_EQ(holders(name), 0);
  EXPECT_EQ(queued(name), 0);
}

TEST_F(SemaphoreTest, FourProcessesNeverMoreThanTwoInside) {
  const std::string name = key("sem");
  const std::string inside = key("inside");
  const std::string peak = key("peak");
  std::vector<Child> workers;
  for (int i = 0; i < 4; ++i)
    workers.push_back(spawn(worker_argv("sem_count", {server().url(), name, "2", inside, peak, "80"})));
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(90s);
    EXPECT_TRUE(result.succeeded()) << result.describe() << worker.stdout_text();
  }
  EXPECT_EQ(raw({"GET", inside}).str, "0");
  EXPECT_EQ(raw({"GET", peak}).str, "2");
  EXPECT_EQ(holders(name), 0);
}

TEST_F(SemaphoreTest, KilledHolderGivesItsPermitBackWithinTtl) {
  const std::string name = key("sem");
  constexpr auto kTtl = 1000ms;
  std::vector<Child> holders_;
  for (int i = 0; i < 2; ++i) {
    holders_.push_back(spawn(worker_argv("sem_hold", {server().url(), name, "2", std::to_string(kTtl.count())})));
    ASSERT_TRUE(holders_.back().wait_for_output("acquired", 10s)) << holders_.back().stderr_text();
  }
  std::this_thread::sleep_for(kTtl + 200ms);  // renewed at least once
  ASSERT_EQ(holders(name), 2) << "permits were not renewed";
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter([&] {
    Semaphore semaphore(client(), name, 2, {.wait_poll_interval = 30s});
    if (semaphore.try_acquire_for(10s)) acquired_ns = Clock::now().time_since_epoch().count();
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  const auto killed = Clock::now();
  holders_[0].kill(SIGKILL);
  waiter.join();
  ASSERT_NE(acquired_ns.load(), 0) << "the crashed holder's permit never came back";
  const long long took_ms = (acquired_ns.load() - killed.time_since_epoch().count()) / 1'000'000;
  std::cout << "permit back after a SIGKILLed holder: " << took_ms << " ms (ttl " << kTtl.count() << " ms)\n";
  EXPECT_LE(took_ms, kTtl.count() + 200);
  EXPECT_TRUE(holders_[1].running()) << "the other holder must keep its permit";
}

// A waiter whose process was SIGKILLed while queued: the hand-over finds
// nobody listening on its channel and moves on to the next waiter at once.
TEST_F(SemaphoreTest, WaiterKilledInTheQueueDoesNotHoldUpTheNext) {
  const std::string name = key("sem");
  Semaphore holder(client(), name, 1, {.wait_poll_interval = 30s});
  holder.acquire();
  Child crashed = spawn(worker_argv("sem_hold", {server().url(), name, "1", "10000"}));
  ASSERT_TRUE(eventually(10s, [&] { return queued(name) == 1; })) << crashed.stderr_text();
  crashed.kill(SIGKILL);
  EXPECT_EQ(crashed.wait(5s).signal, SIGKILL);
  std::atomic<long long> took{-1};
  std::atomic<Clock::time_point> released_at{Clock::time_point::max()};  // read by the waiter
  std::jthread waiter([&] {
    Semaphore semaphore(client(), name, 1, {.wait_poll_interval = 30s});
    if (semaphore.try_acquire_for(8s)) took = ms_since(released_at.load());
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  released_at = Clock::now();
  holder.release();
  waiter.join();
  ASSERT_GE(took.load(), 0) << "the dead waiter kept the permit";
  std::cout << "hand-over past a killed waiter: " << took.load() << " ms\n";
  EXPECT_LT(took.load(), 200);
  EXPECT_EQ(holders(name), 0);
}

// A frozen server: renewals cannot get through, and the permit is declared
// lost (unreachable) before its lease could have run out on the server.
TEST_F(SemaphoreTest, FrozenServerDeclaresThePermitLost) {
  const std::string name = key("sem");
  std::atomic<int> losses{0};
  std::mutex mutex;
  std::string detail;
  const Client fast(server().url() + "?socket_timeout=200ms");
  Semaphore semaphore(fast, name, 1,
                      {.ttl = 600ms, .on_lost = [&](const LossEvent& event) {
                         const std::lock_guard guard(mutex);
                         detail = event.detail;
                         ++losses;
                       }});
  semaphore.acquire();
  const auto frozen = Clock::now();
  server().pause();
  const bool noticed = eventually(3s, [&] { return semaphore.lost(); });
  const long long took = ms_since(frozen);
  // Frozen well past the lease: the renewals in flight time out.
  std::this_thread::sleep_until(frozen + 1500ms);
  server().resume();
  ASSERT_TRUE(noticed);
  EXPECT_LE(took, 700) << "lost() must turn true by the lease's provable end";
  ASSERT_TRUE(eventually(3s, [&] { return losses.load() == 1; }));
  {
    const std::lock_guard guard(mutex);
    EXPECT_NE(detail.find("lapsed"), std::string::npos) << detail;  // unreachable, not "taken"
  }
  EXPECT_TRUE(semaphore.lost());
  semaphore.release();  // never throws; the failure is recorded
  EXPECT_FALSE(semaphore.held());
}

// A permit through the DistributedLock interface (what `lockon run
// --permits` uses): the same keys, so it counts against Semaphore objects.
TEST_F(SemaphoreTest, PermitAsADistributedLock) {
  const std::string name = key("sem");
  EXPECT_THROW(SharedLeaseLock::permit(client(), name, 2, {.fencing = true}), ConfigError);
  EXPECT_THROW(SharedLeaseLock::permit(client(), name, 0), ConfigError);
  auto first = SharedLeaseLock::permit(client(), name, 2, {.ttl = 5s});
  std::unique_ptr<DistributedLock> second = SharedLeaseLock::permit(client(), name, 2);
  EXPECT_FALSE(first->locked());
  ASSERT_TRUE(first->try_lock());
  ASSERT_TRUE(second->try_lock_for(1s));
  Semaphore third(client(), name, 2);
  EXPECT_FALSE(third.try_acquire()) << "both permits are taken";
  EXPECT_TRUE(first->held());
  EXPECT_TRUE(first->owned());
  EXPECT_TRUE(first->locked());
  const auto left = first->remaining_ttl();
  ASSERT_TRUE(left.has_value());
  EXPECT_GT(*left, 4s);
  EXPECT_LE(*left, 5s);
  EXPECT_THROW(first->extend(1s), LockError);
  first->unlock();
  EXPECT_FALSE(first->held());
  EXPECT_FALSE(first->owned());
  EXPECT_EQ(first->last_unlock_error(), nullptr);
  EXPECT_TRUE(third.try_acquire());
}

}  // namespace
}  // namespace lockon::test
