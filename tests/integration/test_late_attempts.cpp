// integration/test_late_attempts.cpp — an attempt that runs after its caller
// gave up. A request whose reply did not come by the caller's deadline may
// still be executed later: the connection it went out on is closed (its
// reply is owed) and the clean-up goes out on another one, and the server
// serves connections in no guaranteed order (FaultProxy's delay holds the
// request; on EOF it still forwards what the client had sent). So a
// confirmed cancel proves nothing about that request: the clean-up must
// sweep again later (lock/orphans.hpp: unknown outcome), and a wait should
// send nothing once its deadline has passed (found by review, session 20).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "lock/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/semaphore.hpp"
#include "shared_lease_support.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// The first attempt (permit free: granted directly) reaches the server
// 300 ms after it was sent, 200 ms after the caller's deadline and after
// its cancel: the permit it took must not stay held by nobody for its TTL.
TEST_F(SharedProxyFaults, AFirstAttemptThatRunsAfterItsDeadlineKeepsNoPermit) {
  const std::string name = key("sem");
  const int late = proxy().add_rule({.command = "EVALSHA",
                                     .argument_contains = "-|-|",
                                     .action = FaultAction::delay,
                                     .delay = 300ms,
                                     .times = 1});
  Semaphore semaphore(via_proxy(), name, 1, {.ttl = 10s});
  EXPECT_FALSE(semaphore.try_acquire_for(100ms));
  EXPECT_EQ(proxy().matched(late), 1u);
  ASSERT_TRUE(eventually(2s, [&] { return holders(name) == 1; })) << "the late attempt never ran";
  EXPECT_TRUE(eventually(3s, [&] { return holders(name) == 0; }))
      << "the permit taken by the attempt that ran late stays held by nobody (PTTL of its lease: "
      << pttl(detail::companion_key(name, "sh")) << " ms)";
  Semaphore other(client(), name, 1);
  EXPECT_TRUE(other.try_acquire_for(1s));
}

// A wait that times out sends its cancel and nothing else after its
// deadline: no attempt whose reply nobody reads (it breaks its pooled
// connection and leaves an outcome to clean up).
TEST_F(SharedProxyFaults, ATimedOutWaitSendsNoAttemptAfterItsDeadline) {
  const std::string name = key("sem");
  Semaphore holder(client(), name, 1, {.ttl = 10s});
  ASSERT_TRUE(holder.try_acquire());
  const int scripts = proxy().add_rule({.command = "EVALSHA", .argument_contains = "|p|"});
  const auto connections = proxy().connections_accepted();
  Semaphore waiter(via_proxy(), name, 1, {.ttl = 3s, .wait_poll_interval = 10s});
  EXPECT_FALSE(waiter.try_acquire_for(150ms));
  // The direct attempt, the queueing attempt, the cancel.
  EXPECT_EQ(proxy().matched(scripts), 3u);
  EXPECT_EQ(proxy().connections_accepted(), connections) << "a pooled connection was broken by an unread reply";
  EXPECT_EQ(queued(name), 0);
  holder.release_or_throw();
}

// The Lock's queueing attempt on a pooled connection (auto_pipeline=0, as
// on Sentinel and Cluster): it reaches the server after the caller's
// deadline and its confirmed cancel, and queues the departed waiter; the
// holder's release then hands K to it (its process still listens on the
// channel, which lingers). K must not stay held by nobody for the lease.
class LockProxyPool : public ClientTest {
 protected:
  void SetUp() override {
    ClientTest::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
    via_proxy_ = std::make_unique<Client>(proxy_->url() + "?auto_pipeline=0");
    // Loads the queue scripts, so that the faults below hit EVALSHA.
    const std::string warm_name = key("warm");
    Lock warm(client(), warm_name);
    ASSERT_TRUE(warm.try_lock());
    Lock warm_waiter(*via_proxy_, warm_name);
    ASSERT_FALSE(warm_waiter.try_lock_for(20ms));
    warm.unlock();
  }
  FaultProxy& proxy() { return *proxy_; }
  Client& via_proxy() { return *via_proxy_; }
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "q")}).integer; }

  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> via_proxy_;
};

TEST_F(LockProxyPool, AQueueingAttemptThatRunsAfterItsDeadlineLeavesNoHolderlessKey) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  const int late = proxy().add_rule({.command = "EVALSHA", .action = FaultAction::delay, .delay = 300ms, .times = 1});
  Lock waiter(via_proxy(), name, {.ttl = 10s});
  EXPECT_FALSE(waiter.try_lock_for(100ms));
  EXPECT_EQ(proxy().matched(late), 1u);
  ASSERT_TRUE(eventually(2s, [&] { return queued(name) == 1; })) << "the late queueing attempt never ran";
  holder.unlock();  // hands K to the departed waiter's entry, whose process still listens
  Lock next(client(), name, {.ttl = 10s});
  const auto started = std::chrono::steady_clock::now();
  const bool got = next.try_lock_for(3s);
  EXPECT_TRUE(got) << "K stayed held by the departed waiter's token (PTTL " << pttl(name) << " ms)";
  if (got) {
    std::cout << "K free again " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - started).count()
              << " ms after the release\n";
    next.unlock();
  }
}

// A queueing attempt held back 3 s, past the sweeps of session 20 (they
// ended ~1.1 s after the clean-up was adopted: 50 ms and 1 s after the
// first success); a TCP retransmission or a proxy can hold a request that
// long. Another thread of the same process then waits on K (as lock_on's
// callers do), so the departed entry's wake channel counts as heard and the
// release hands K to a token nobody holds. Before: K stayed there until its
// 10 s lease ran out (the other thread's try_lock_for(5 s) failed); the
// sweep 5 s after the first success passes it on.
TEST_F(LockProxyPool, AQueueingAttemptHeldBackThreeSecondsLeavesNoHolderlessKey) {
  const std::string name = key("lock-3s");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  const int late = proxy().add_rule({.command = "EVALSHA", .action = FaultAction::delay, .delay = 3000ms, .times = 1});
  Lock departed(via_proxy(), name, {.ttl = 10s});
  const auto gave_up = std::chrono::steady_clock::now();
  EXPECT_FALSE(departed.try_lock_for(100ms));
  EXPECT_EQ(proxy().matched(late), 1u);
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; })) << "the late queueing attempt never ran";
  EXPECT_GT(std::chrono::steady_clock::now() - gave_up, 2s) << "the attempt was not held back past the early sweeps";
  std::atomic<bool> got{false};
  std::atomic<long long> took_ms{-1};
  std::thread other([&] {
    Lock same_process(via_proxy(), name, {.ttl = 10s});
    const auto started = std::chrono::steady_clock::now();
    if (same_process.try_lock_for(5s)) {
      took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
      got = true;
      same_process.unlock();
    }
  });
  ASSERT_TRUE(eventually(2s, [&] { return queued(name) == 2; })) << "the other thread never queued";
  holder.unlock();  // hands K to the departed entry: its channel is heard
  other.join();
  EXPECT_TRUE(got.load()) << "K stayed held by the departed waiter's token (PTTL " << pttl(name) << " ms)";
  std::cout << "the other thread got K after " << took_ms.load() << " ms\n";
}

// The same with the queue place kept past the deadline (keep_queue_place,
// as lock_on always does) and given up afterwards: by abandon_wait(), or by
// the Lock's destructor. The late attempt's place must still be swept.
class LockProxyPoolKeptPlace : public LockProxyPool, public ::testing::WithParamInterface<bool> {};

TEST_P(LockProxyPoolKeptPlace, AKeptPlaceEndedLaterStillSweepsTheLateAttempt) {
  const bool by_destructor = GetParam();
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  const int late = proxy().add_rule({.command = "EVALSHA", .action = FaultAction::delay, .delay = 300ms, .times = 1});
  {
    Lock waiter(via_proxy(), name, {.ttl = 10s, .keep_queue_place = true});
    EXPECT_FALSE(waiter.try_lock_for(100ms));
    EXPECT_EQ(proxy().matched(late), 1u);
    if (!by_destructor) waiter.abandon_wait();  // its cancel is confirmed before the late attempt runs
  }
  ASSERT_TRUE(eventually(2s, [&] { return queued(name) == 1; })) << "the late queueing attempt never ran";
  holder.unlock();  // hands K to the departed waiter's entry, whose process still listens
  Lock next(client(), name, {.ttl = 10s});
  EXPECT_TRUE(next.try_lock_for(3s)) << "K stayed held by the departed waiter's token (PTTL " << pttl(name) << " ms)";
}

INSTANTIATE_TEST_SUITE_P(EndedBy, LockProxyPoolKeptPlace, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& ended_by) { return ended_by.param ? "Destructor" : "AbandonWait"; });

// A hand-over taken at the deadline while the waiter's last attempt (a
// poll) is still unread: the waiter holds K and releases it at once; the
// late poll then runs on a free K and takes it with the waiter's old
// token. The release must leave a sweep for it (found by review, session
// 20), or K stays held by nobody for its lease.
TEST_F(LockProxyPool, AnAttemptStillUnreadWhenAHandOverIsTakenIsSweptAfterTheRelease) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  // A second waiter of the same process (Client), on another key: with two
  // waiters the subscriber's thread reads the wake-ups (a lone waiter reads
  // them itself, and would not have read ours while its poll was owed).
  const std::string other = key("other");
  Lock other_holder(client(), other, {.ttl = 10s});
  ASSERT_TRUE(other_holder.try_lock());
  std::jthread other_thread([&] {
    Lock other_waiter(via_proxy(), other, {.ttl = 10s, .wait_poll_interval = 10s});
    if (other_waiter.try_lock_for(3s)) other_waiter.unlock();
  });
  ASSERT_TRUE(eventually(2s, [&] { return queued(other) == 1; }));
  std::atomic<int> got{-1};
  std::jthread waiter_thread([&] {
    Lock waiter(via_proxy(), name, {.ttl = 10s, .wait_poll_interval = 50ms});
    got = waiter.try_lock_for(400ms) ? 1 : 0;
    if (got == 1) waiter.unlock();
  });
  ASSERT_TRUE(eventually(2s, [&] { return queued(name) == 1; }));
  // The waiter's next script is its poll, ~50 ms after it queued: held 600 ms.
  const int late = proxy().add_rule({.command = "EVALSHA", .action = FaultAction::delay, .delay = 600ms, .times = 1});
  ASSERT_TRUE(eventually(2s, [&] { return proxy().matched(late) == 1; }));
  holder.unlock();  // hands K to the waiter while its poll's reply is owed
  waiter_thread.join();
  ASSERT_EQ(got.load(), 1) << "the hand-over raced with the deadline and should have been taken";
  // The poll reaches the server ~600 ms after it was sent, on a free K.
  ASSERT_TRUE(eventually(2s, [&] { return exists(name); })) << "the late poll never ran";
  Lock next(client(), name, {.ttl = 10s});
  EXPECT_TRUE(next.try_lock_for(3s)) << "K stayed held by the waiter's old token (PTTL " << pttl(name) << " ms)";
  other_holder.unlock();
}

TEST_F(LockProxyPool, ATimedOutWaitSendsNoAttemptAfterItsDeadline) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  // Attempts (the wait script) and clean-ups (the cancel script) counted
  // apart: when the queueing attempt's reply comes after the deadline (ASan,
  // a loaded machine) its outcome is unknown and the clean-up sweeps again,
  // which is right; an attempt after the deadline is not.
  const int attempts = proxy().add_rule({.command = "EVALSHA", .argument_contains = detail::scripts::wait_attempt().sha()});
  const int cancels = proxy().add_rule({.command = "EVALSHA", .argument_contains = detail::scripts::cancel_wait().sha()});
  const auto connections = proxy().connections_accepted();
  Lock waiter(via_proxy(), name, {.ttl = 3s, .wait_poll_interval = 10s});
  EXPECT_FALSE(waiter.try_lock_for(150ms));
  // At most the queueing attempt (the fast path is a SET), and its cancel.
  EXPECT_LE(proxy().matched(attempts), 1u) << "an attempt was sent after the deadline";
  if (proxy().matched(attempts) == 1)
    EXPECT_GE(proxy().matched(cancels), 1u) << "the abandoned place was not cancelled";
  EXPECT_EQ(proxy().connections_accepted(), connections) << "a pooled connection was broken by an unread reply";
  EXPECT_EQ(queued(name), 0);
  holder.unlock();
}

}  // namespace
}  // namespace lockon::test
