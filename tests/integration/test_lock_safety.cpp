// Fault tests of the single-instance lock's guarantees: each reproduces a
// defect found by fault trials (paused waiters, restarts, stalls, error
// replies, ACL users, token misuse) and failed on the code before its fix.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/diagnostics.hpp"
#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockSafety : public ClientTest {
 protected:
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "q")}).integer; }
};

// A waiter handed the lock while SIGSTOPped, whose lease ran out before it
// resumed (the next waiter acquired meanwhile), must not report "acquired":
// it confirms the grant, finds the key taken, and queues again.
TEST_F(LockSafety, WaiterPausedPastAHandedLeaseQueuesAgainInsteadOfRunning) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  Child waiter = spawn(worker_argv("wait_then_check", {server().url(), name, "500", "8000"}));
  ASSERT_TRUE(waiter.wait_for_output("ready", 5s)) << waiter.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  waiter.kill(SIGSTOP);

  Lock next(client(), name, {.ttl = 10s});
  std::atomic<int> next_acquired{-1};
  std::jthread next_thread([&] { next_acquired = next.try_lock_for(5s) ? 1 : 0; });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  holder.unlock();  // handed to the stopped waiter; its 500 ms lease runs out
  next_thread.join();
  ASSERT_EQ(next_acquired.load(), 1) << "the next waiter never got the expired hand-over";

  waiter.kill(SIGCONT);
  // Resumed, it must queue again behind `next` rather than run beside it.
  const bool requeued = eventually(5s, [&] { return queued(name) == 1; });
  const std::string early = waiter.stdout_text();
  EXPECT_EQ(early.find("acquired"), std::string::npos) << "reported acquired while another holder ran: " << early;
  EXPECT_TRUE(requeued) << waiter.stdout_text();
  EXPECT_TRUE(next.owned());
  next.unlock();
  const ProcessResult result = waiter.wait(10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_NE(result.out.find("acquired owned=1"), std::string::npos) << result.describe();
}

// A waiter handed the lock after waiting more than half its ttl confirms
// the grant with one renewal round trip; a waiter queued behind it must not
// break that. Found by review (session 23): that renewal ran with the
// lock's seven keys, so the holder-record check read the queue (a LIST) as
// the record: WRONGTYPE, and the acquisition threw.
TEST_F(LockSafety, ALateHandOverIsConfirmedWithAnotherWaiterQueued) {
  const std::string name = key("late-confirm");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  Lock first(client(), name, {.ttl = 400ms});
  Lock second(client(), name, {.ttl = 400ms});
  std::string first_error;
  std::atomic<int> first_acquired{-1};
  std::jthread first_thread([&] {
    try {
      first_acquired = first.try_lock_for(8s) ? 1 : 0;
    } catch (const std::exception& e) {
      first_error = e.what();
      first_acquired = 0;
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  std::atomic<int> second_acquired{-1};
  std::jthread second_thread([&] {
    try {
      second_acquired = second.try_lock_for(8s) ? 1 : 0;
    } catch (const std::exception&) {
      second_acquired = 0;
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  std::this_thread::sleep_for(300ms);  // the first waiter's grant comes later than ttl / 2 after it queued
  holder.unlock();
  first_thread.join();
  EXPECT_EQ(first_acquired.load(), 1) << first_error;
  if (first_acquired.load() == 1) first.unlock();
  second_thread.join();
  EXPECT_EQ(second_acquired.load(), 1);
  if (second_acquired.load() == 1) second.unlock();
}

// Fences never go backwards, even when the server restarts empty: a fence
// is at least the server's clock in microseconds.
TEST_F(LockSafety, FencesKeepIncreasingAcrossARestartWithoutPersistence) {
  RedisServer own;
  const std::string name = key("lock");
  std::uint64_t before = 0;
  {
    const Client first(own.url());
    Lock lock(first, name, {.ttl = 5s, .fencing = true});
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(lock.try_lock());
      EXPECT_GT(lock.fence(), before);
      before = lock.fence();
      lock.unlock();
    }
  }
  own.restart();  // empty: the fence counter is gone
  const Client second(own.url());
  Lock lock(second, name, {.ttl = 5s, .fencing = true});
  ASSERT_TRUE(lock.try_lock());
  EXPECT_GT(lock.fence(), before) << "the fence went backwards after a restart";
  // The counter is bounded in time (it used to live forever).
  const long long counter_ttl = own.command({"PTTL", detail::companion_key(name, "fence")}).integer;
  EXPECT_GT(counter_ttl, 0);
  EXPECT_LE(counter_ttl, 3'600'000);
  lock.unlock();
}

// Fences handed over to a waiter are above the holder's as well.
TEST_F(LockSafety, HandedOverFencesIncreaseToo) {
  const std::string name = key("lock");
  Lock holder(client(), name, {.ttl = 5s, .fencing = true});
  Lock waiter(client(), name, {.ttl = 5s, .fencing = true});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> got{false};
  std::jthread t([&] { got = waiter.try_lock_for(5s); });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  const std::uint64_t first = holder.fence();
  holder.unlock();
  t.join();
  ASSERT_TRUE(got.load());
  EXPECT_GT(waiter.fence(), first);
  waiter.unlock();
}

// A release that fails (server gone) cannot prove the lease was held to
// its end: it is a loss, and lock_on reports LockLost instead of success.
TEST_F(LockSafety, ReleaseThatFailsIsReportedAsALoss) {
  RedisServer own;
  const Client client(own.url() + "?socket_timeout=300ms&connect_timeout=300ms");
  std::atomic<int> losses{0};
  Lock lock(client, key("lock"), {.ttl = 5s, .auto_renew = false, .on_lost = [&](const LossEvent&) { ++losses; }});
  ASSERT_TRUE(lock.try_lock());
  own.kill();
  lock.unlock();  // noexcept; the failure is recorded
  EXPECT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_TRUE(lock.lost());
  EXPECT_EQ(losses.load(), 1);
}

TEST_F(LockSafety, LockOnReportsLockLostWhenTheReleaseFails) {
  RedisServer own;
  RedisLocker locker(Client(own.url() + "?socket_timeout=300ms&connect_timeout=300ms"),
                     {.max_retry = 1, .ttl = 5s, .key_prefix = key("p")});
  const auto body = locker.lock_on<0>("restarts", [&](int) {
    own.kill();
    return 1;
  });
  EXPECT_THROW(body(1), LockLost);
}

// lost() turns true by the clock once the provable lease end passed
// without a renewal, before anyone declared anything.
TEST_F(LockSafety, LostTurnsTrueWhenTheLeaseEndPassesUnrenewed) {
  Lock lock(client(), key("lock"), {.ttl = 300ms, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.lost());
  std::this_thread::sleep_for(350ms);
  EXPECT_TRUE(lock.lost());
  lock.unlock();
}

// A clean release ends the lease: lost() does not turn true afterwards.
TEST_F(LockSafety, CleanReleaseIsNeverLaterReportedLost) {
  Lock lock(client(), key("lock"), {.ttl = 100ms, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  lock.unlock();
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(lock.lost());
}

// Waiters that time out while the server is stalled could not cancel
// their queue places; their process still listens on the key's channel
// (another waiter), so hand-overs used to go to them, a lease each. After
// the stall the lock must be usable again within about one lease.
TEST_F(LockSafety, WaitersTimedOutDuringAStallLeaveNoPhantomOwners) {
  RedisServer own;
  const Client client(own.url() + "?socket_timeout=300ms");  // much shorter than the stall
  RawConnection probe = own.connect();
  const std::string name = key("lock");
  const auto queue_length = [&] { return probe.command({"LLEN", detail::companion_key(name, "q")}).integer; };
  Lock holder(client, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<int> errors{0};  // of the patient waiter
  std::vector<std::thread> impatient;
  std::atomic<int> impatient_acquired{0};
  for (int i = 0; i < 3; ++i) {
    impatient.emplace_back([&] {
      try {
        Lock lock(client, name, {.ttl = 1s});
        if (lock.try_lock_for(600ms)) ++impatient_acquired;
      } catch (const Error&) {
        // A waiter that polled during the stall may report it as a timeout.
      }
    });
  }
  ASSERT_TRUE(eventually(5s, [&] { return queue_length() == 3; }));
  // Queued behind them, in the same process (it keeps their channel
  // subscribed), sleeping through the stall without I/O.
  std::atomic<int> patient_acquired{-1};
  Lock patient(client, name, {.ttl = 1s, .wait_poll_interval = 10s});
  std::jthread patient_thread([&] {
    try {
      patient_acquired = patient.try_lock_for(15s) ? 1 : 0;
    } catch (const Error&) {
      ++errors;
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queue_length() == 4; }));
  own.pause();
  std::this_thread::sleep_for(1500ms);  // the impatient deadlines pass, their cancels fail
  own.resume();
  for (auto& t : impatient) t.join();
  EXPECT_EQ(impatient_acquired.load(), 0);
  const auto released = Clock::now();
  holder.unlock();
  patient_thread.join();
  const long long took = ms_since(released);
  ASSERT_EQ(patient_acquired.load(), 1) << errors.load() << " errors";
  std::cout << "patient waiter acquired " << took << " ms after the release that followed the stall\n";
  EXPECT_LT(took, 900) << "phantom queue entries held the lock after the stall";
  EXPECT_EQ(errors.load(), 0);
  patient.unlock();
}

// lock_on keeps one queue place for the whole call: a call that arrived
// later never overtakes one that arrived earlier because of retry windows.
TEST_F(LockSafety, LockOnServesCallsInArrivalOrderAcrossRetryWindows) {
  RedisLocker locker(client(), {.max_retry = 0, .retry_delay = 200ms, .timeout = 10s, .key_prefix = key("p")});
  std::mutex mutex;
  std::vector<std::string> order;
  // No argument selected: every call locks the same key.
  const auto shared = locker.lock_on<>("ordered-shared", [&](const std::string& who) {
    const std::lock_guard guard(mutex);
    order.push_back(who);
  });
  Lock blocker(client(), shared.key_for(std::string("first")), {.ttl = 10s});
  ASSERT_TRUE(blocker.try_lock());
  const auto start = Clock::now();
  std::thread first([&] { shared(std::string("first")); });
  std::this_thread::sleep_until(start + 100ms);
  std::thread second([&] { shared(std::string("second")); });
  // Released when the second call re-queued after the first (the old
  // behaviour): windows end at 200 k ms for the first, 100 + 200 k ms for
  // the second.
  std::this_thread::sleep_until(start + 850ms);
  blocker.unlock();
  first.join();
  second.join();
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
}

// A user whose ACL grants no channels (Redis 7's default for new users):
// releases cannot publish wake-ups, but must neither fail nor lose the
// lock; waiters poll; lockon says once what is missing.
TEST_F(LockSafety, AclUserWithoutChannelRightsStillLocksAndIsWarnedOnce) {
  RedisServer own({.acl_users = {"locker on >pw ~* resetchannels +@all"}});
  std::mutex mutex;
  std::vector<std::string> topics;
  set_warning_handler([&](std::string_view topic, std::string_view message) {
    const std::lock_guard guard(mutex);
    topics.emplace_back(topic);
    EXPECT_EQ(std::string(message).find("pw"), std::string::npos);
  });
  const Client client("redis://locker:pw@127.0.0.1:" + std::to_string(own.port()));
  const std::string name = key("lock");
  Lock holder(client, name, {.ttl = 5s});
  Lock waiter(client, name, {.ttl = 5s, .wait_poll_interval = 50ms});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<int> got{-1};
  std::jthread t([&] { got = waiter.try_lock_for(5s) ? 1 : 0; });
  RawConnection probe = own.connect();
  ASSERT_TRUE(eventually(5s, [&] { return probe.command({"LLEN", detail::companion_key(name, "q")}).integer == 1; }));
  EXPECT_NO_THROW(holder.release());
  t.join();
  EXPECT_EQ(got.load(), 1);
  waiter.unlock();
  set_warning_handler({});
  const std::lock_guard guard(mutex);
  const auto publish_warnings = std::count_if(topics.begin(), topics.end(),
                                              [](const std::string& topic) { return topic.rfind("acl:publish", 0) == 0; });
  EXPECT_EQ(publish_warnings, 1) << topics.size() << " warnings";
}

// Two Lock objects given the same custom token used to both "hold" the
// lock (the waiter took the key holding its token for a hand-over).
TEST_F(LockSafety, ACustomTokenCannotBeHeldTwice) {
  const std::string name = key("lock");
  Lock first(client(), name, {.ttl = 5s, .token = std::string("shared-token")});
  Lock second(client(), name, {.ttl = 5s, .token = std::string("shared-token")});
  ASSERT_TRUE(first.try_lock());
  EXPECT_THROW(second.try_lock_for(300ms), LockError);
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(first.owned());
  first.unlock();
}

// Under OOM the fenced acquisition fails with the server's error, and the
// pooled connection stays in step: later calls get their own replies.
TEST_F(LockSafety, ErrorReplyInsideTheFencedAcquireLeavesNoConnectionOutOfStep) {
  RedisServer own;
  const Client client(own.url(), {.size = 1});
  const std::string held = key("held");
  ASSERT_TRUE(own.command({"SET", held, "someone-else", "PX", "60000"}).is("OK"));
  ASSERT_TRUE(own.command({"SET", "filler", std::string(1 << 16, 'x')}).is("OK"));
  ASSERT_TRUE(own.command({"CONFIG", "SET", "maxmemory", "1"}).is("OK"));
  Lock fenced(client, key("free"), {.ttl = 5s, .fencing = true});
  EXPECT_THROW(fenced.try_lock(), ReplyError);
  ASSERT_TRUE(own.command({"CONFIG", "SET", "maxmemory", "0"}).is("OK"));
  for (int i = 0; i < 3; ++i) {
    Lock other(client, held, {.ttl = 5s, .fencing = i % 2 == 0});
    bool acquired = false;
    EXPECT_NO_THROW(acquired = other.try_lock()) << "attempt " << i;
    EXPECT_FALSE(acquired) << "attempt " << i << " acquired a lock someone else holds";
  }
  EXPECT_EQ(client.command({"GET", held}).as_string(), "someone-else");
}

// Every fenced lock_on argument tuple used to leave a fence counter
// forever; counters now expire.
TEST_F(LockSafety, FenceCountersOfManyArgumentsAllExpire) {
  RedisLocker locker(client(), {.max_retry = 1, .ttl = 5s, .key_prefix = key("p"), .fencing = true});
  const auto fenced = locker.lock_on<0>("fenced", [](LockContext& context, int) { return context.fence(); });
  for (int i = 0; i < 20; ++i) EXPECT_GT(fenced(i), 0u);
  for (int i = 0; i < 20; ++i) {
    const std::string counter = detail::companion_key(fenced.key_for(i), "fence");
    const long long ttl = pttl(counter);
    EXPECT_GT(ttl, 0) << counter;
  }
}

// The ACL rules the README gives a lockon user are enough: plain locks,
// contention with hand-over, fencing, renewal, and lock_on.
TEST_F(LockSafety, TheReadmeAclRulesAreSufficient) {
  const std::string rules =
      "app on >pw resetkeys ~orders:* ~{orders:* resetchannels &{orders:* -@all "
      "+get +set +del +exists +pttl +pexpire +eval +evalsha +lpop +rpush +lindex +lpos +lrem +time +multi +exec +incr "
      "+publish +subscribe +unsubscribe +ping +hello +auth +select +hget +hsetnx +hdel";
  RedisServer own({.acl_users = {rules}});
  std::mutex mutex;
  std::vector<std::string> warnings;
  set_warning_handler([&](std::string_view topic, std::string_view) {
    const std::lock_guard guard(mutex);
    warnings.emplace_back(topic);
  });
  const Client client("redis://app:pw@127.0.0.1:" + std::to_string(own.port()));
  const std::string name = "orders:" + key("lock");
  Lock holder(client, name, {.ttl = 3s, .fencing = true});
  Lock waiter(client, name, {.ttl = 3s, .fencing = true});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<int> got{-1};
  const auto start = Clock::now();
  std::jthread t([&] { got = waiter.try_lock_for(5s) ? 1 : 0; });
  RawConnection probe = own.connect();
  ASSERT_TRUE(eventually(5s, [&] { return probe.command({"LLEN", detail::companion_key(name, "q")}).integer == 1; }));
  std::this_thread::sleep_for(1100ms);  // one renewal (ttl/3) of the holder's lease
  EXPECT_FALSE(holder.lost());
  holder.unlock();
  t.join();
  EXPECT_EQ(got.load(), 1);
  EXPECT_GT(waiter.fence(), holder.fence());
  EXPECT_LT(ms_since(start), 2000) << "the hand-over fell back to polling";
  waiter.unlock();
  EXPECT_EQ(holder.last_unlock_error(), nullptr);
  RedisLocker locker(client, {.max_retry = 1, .ttl = 3s, .key_prefix = "orders", .fencing = true});
  EXPECT_EQ(locker.lock_on<0>("pay", [](int x) { return x * 2; })(21), 42);
  set_warning_handler({});
  const std::lock_guard guard(mutex);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

}  // namespace
}  // namespace lockon::test
