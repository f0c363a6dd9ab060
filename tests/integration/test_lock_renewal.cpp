// integration/test_lock_renewal.cpp — the lease over its life: the watchdog
// (automatic renewal, loss detection, max_hold, no renewal after unlock),
// and holders that die without releasing (SIGKILLed worker processes).
// Failures (other clients, WRONGTYPE keys, bad input, a server that goes
// away) are in test_lock_failures.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/steady_time.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Collects on_lost events (called from the watchdog thread).
struct LossLog {
  std::mutex mutex;
  std::vector<LossEvent> events;
  std::vector<Clock::time_point> times;

  std::function<void(const LossEvent&)> callback() {
    return [this](const LossEvent& event) {
      const std::lock_guard guard(mutex);
      events.push_back(event);
      times.push_back(Clock::now());
    };
  }
  std::size_t count() {
    const std::lock_guard guard(mutex);
    return events.size();
  }
};

class LockRenewal : public ClientTest {
 protected:
  long long queue_length(const std::string& name) {
    return raw({"LLEN", detail::companion_key(name, "q")}).integer;
  }
};

// ------------------------------------------------------------- watchdog

TEST_F(LockRenewal, WatchdogKeepsALongHoldOwnedAndStopsAtUnlock) {
  const std::string name = key("lock");
  LossLog losses;
  Lock lock(client(), name, {.ttl = 1s, .on_lost = losses.callback()});
  ASSERT_TRUE(lock.try_lock());
  const auto start = Clock::now();
  long long min_pttl = 1000;
  int checks = 0;
  while (Clock::now() - start < 4s) {  // four TTLs of "work"
    std::this_thread::sleep_for(100ms);
    const long long left = pttl(name);
    min_pttl = std::min(min_pttl, left);
    ASSERT_GT(left, 0) << "the lease lapsed after " << ms_since(start) << " ms";
    ASSERT_LE(left, 1000);
    ++checks;
  }
  EXPECT_TRUE(lock.owned());
  EXPECT_FALSE(lock.lost());
  EXPECT_FALSE(lock.lost_token().stop_requested());
  EXPECT_EQ(losses.count(), 0u);
  // Renewal at ttl/3 keeps at least ~2/3 of the lease left.
  EXPECT_GT(min_pttl, 400) << "over " << checks << " checks";
  std::cout << "lowest PTTL seen during a 4 s hold of a 1 s lease: " << min_pttl << " ms\n";

  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  // Nothing brings the key back for three TTLs.
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(exists(name)) << "key reappeared " << i * 500 << " ms after unlock";
    std::this_thread::sleep_for(500ms);
  }
  EXPECT_FALSE(exists(name));
  EXPECT_EQ(losses.count(), 0u);
}

TEST_F(LockRenewal, ExternalDeleteIsDetectedWithinATtlThird) {
  const std::string name = key("lock");
  LossLog losses;
  Lock lock(client(), name, {.ttl = 900ms, .on_lost = losses.callback()});
  std::atomic<int> stop_callbacks{0};
  ASSERT_TRUE(lock.try_lock());
  const std::stop_callback on_stop(lock.lost_token(), [&] { ++stop_callbacks; });
  std::this_thread::sleep_for(100ms);  // mid-interval, not right at a renewal

  ASSERT_EQ(raw({"DEL", name}).integer, 1);
  const auto deleted = Clock::now();
  ASSERT_TRUE(eventually(3s, [&] { return lock.lost(); })) << "loss never detected";
  const long long detected = ms_since(deleted);
  std::cout << "loss detected " << detected << " ms after the key was deleted (ttl/3 = 300 ms)\n";
  EXPECT_LE(detected, 300 + 150);
  EXPECT_TRUE(lock.lost_token().stop_requested());
  EXPECT_TRUE(eventually(1s, [&] { return losses.count() == 1; }));
  EXPECT_EQ(stop_callbacks.load(), 1);
  EXPECT_TRUE(lock.held());  // local state until unlock
  EXPECT_FALSE(exists(name));  // renewal never recreates the key

  std::this_thread::sleep_for(700ms);  // more renewal periods: no second report
  EXPECT_EQ(losses.count(), 1u);
  EXPECT_THROW(lock.release(), LockNotOwned);
  EXPECT_EQ(losses.count(), 1u);
  const std::lock_guard guard(losses.mutex);
  ASSERT_EQ(losses.events.size(), 1u);
  EXPECT_EQ(losses.events[0].name, name);
  EXPECT_EQ(losses.events[0].reason, LossReason::taken);
  EXPECT_FALSE(losses.events[0].detail.empty());
}

TEST_F(LockRenewal, KeyTakenByAnotherOwnerIsReportedLostAndLeftAlone) {
  const std::string name = key("lock");
  LossLog losses;
  Lock lock(client(), name, {.ttl = 600ms, .on_lost = losses.callback()});
  ASSERT_TRUE(lock.try_lock());
  const std::string token = raw({"GET", name}).str;
  ASSERT_TRUE(raw({"SET", name, "intruder", "PX", "5000"}).is("OK"));
  ASSERT_TRUE(eventually(2s, [&] { return losses.count() == 1; }));
  EXPECT_TRUE(lock.lost());
  EXPECT_EQ(raw({"GET", name}).str, "intruder");
  EXPECT_LE(pttl(name), 5000);
  {
    const std::lock_guard guard(losses.mutex);
    EXPECT_EQ(losses.events[0].reason, LossReason::taken);
    EXPECT_EQ(losses.events[0].detail.find(token), std::string::npos) << "the token leaked into the event";
  }
  lock.unlock();
  EXPECT_EQ(raw({"GET", name}).str, "intruder");
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), LockNotOwned);
  EXPECT_EQ(losses.count(), 1u);
}

TEST_F(LockRenewal, MaxHoldEndsRenewalAndReportsTheLoss) {
  const std::string name = key("lock");
  LossLog losses;
  Lock lock(client(), name, {.ttl = 300ms, .max_hold = 600ms, .on_lost = losses.callback()});
  ASSERT_TRUE(lock.try_lock());
  const auto acquired = Clock::now();
  // Renewed past its own ttl while within max_hold.
  std::this_thread::sleep_for(450ms);
  EXPECT_TRUE(lock.owned()) << "not renewed within max_hold";
  EXPECT_FALSE(lock.lost());

  ASSERT_TRUE(eventually(3s, [&] { return lock.lost(); })) << "max_hold never ended the lease";
  const long long lost_after = ms_since(acquired);
  std::cout << "max_hold 600 ms / ttl 300 ms: lost " << lost_after << " ms after acquisition\n";
  EXPECT_GE(lost_after, 600);
  EXPECT_LE(lost_after, 600 + 300 + 200);
  // lost() may turn true by the clock (the lease end) a moment before the
  // watchdog declares the loss, which is what requests the stop.
  EXPECT_TRUE(eventually(1s, [&] { return lock.lost_token().stop_requested(); }));
  ASSERT_TRUE(eventually(1s, [&] { return losses.count() == 1; }));
  {
    const std::lock_guard guard(losses.mutex);
    EXPECT_EQ(losses.events[0].reason, LossReason::max_hold);
    EXPECT_EQ(losses.events[0].name, name);
  }
  // The lease really ran out (within a few ms of the report).
  EXPECT_TRUE(eventually(200ms, [&] { return !exists(name); }));
  Lock other(client(), name);
  EXPECT_TRUE(other.try_lock());
  lock.unlock();
  EXPECT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_TRUE(other.owned());
  EXPECT_EQ(losses.count(), 1u);
}

// Without renewal the lease simply ends at its ttl, and that end must be
// signalled like any other loss: lost_token() stopped and on_lost called,
// not just lost() turning true for whoever polls it. Before the fix a
// non-renewing lease was never shown to the watchdog: after 400 ms lost()
// was true but stop_requested() false and on_lost never called (review,
// session 21).
TEST_F(LockRenewal, WithoutRenewalTheLeaseEndRequestsStopAndCallsOnLost) {
  LossLog log;
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 200ms, .auto_renew = false, .on_lost = log.callback()});
  const auto before_acquiring = Clock::now();
  ASSERT_TRUE(lock.try_lock());
  const std::stop_token stop = lock.lost_token();
  std::atomic<long long> stop_callback_after_ms{-1};
  const std::stop_callback on_stop(stop, [&] { stop_callback_after_ms = ms_since(before_acquiring); });
  while (ms_since(before_acquiring) < 400 && !stop.stop_requested()) std::this_thread::sleep_for(2ms);
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(stop.stop_requested());
  // request_stop() sets the flag before it runs the callbacks, on the
  // watchdog's thread, and on_lost follows: both are awaited (bounded), or a
  // loaded machine reads the callback's time before it was written.
  EXPECT_TRUE(eventually(1s, [&] { return stop_callback_after_ms.load() >= 0 && log.count() == 1; }));
  // The lease is counted from the request's send time: never before 200 ms,
  // and the signal follows within 100 ms.
  EXPECT_GE(stop_callback_after_ms.load(), 200);
  EXPECT_LE(stop_callback_after_ms.load(), 300);
  ASSERT_EQ(log.count(), 1u);
  const long long on_lost_after_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(log.times[0] - before_acquiring).count();
  EXPECT_GE(on_lost_after_ms, 200);
  EXPECT_LE(on_lost_after_ms, 300);
  EXPECT_EQ(log.events[0].name, name);
  lock.unlock();  // finds the key expired: the loss is not reported twice
  EXPECT_EQ(log.count(), 1u);
}

TEST_F(LockRenewal, UnreachableServerIsReportedOnceTheLeaseCouldHaveLapsed) {
  const std::string name = key("lock");
  LossLog losses;
  const Client impatient(server().url() + "?socket_timeout=200ms");
  Lock lock(impatient, name, {.ttl = 600ms, .on_lost = losses.callback()});
  ASSERT_TRUE(lock.try_lock());
  const auto acquired = Clock::now();
  server().pause();  // renewals now time out
  // lost() turns true by the clock at the lease end; the watchdog's report
  // (the callback) follows once its retries ran out.
  const bool lost = eventually(3s, [&] { return losses.count() == 1; });
  EXPECT_TRUE(lock.lost());
  const long long lost_after = ms_since(acquired);
  server().resume();
  ASSERT_TRUE(lost) << "an unreachable server was never reported";
  std::cout << "unreachable (ttl 600 ms, socket timeout 200 ms): lost " << lost_after << " ms after acquisition\n";
  EXPECT_GE(lost_after, 600 - 60);  // not before the lease could have run out
  EXPECT_LE(lost_after, 600 + 200 + 300);
  ASSERT_TRUE(eventually(1s, [&] { return losses.count() == 1; }));
  {
    const std::lock_guard guard(losses.mutex);
    EXPECT_EQ(losses.events[0].reason, LossReason::unreachable);
  }
  lock.unlock();  // the lease has expired meanwhile
  EXPECT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_EQ(losses.count(), 1u);
}

TEST_F(LockRenewal, RenewalNeverOutlivesUnlock) {
  const std::string name = key("lock");
  LossLog losses;
  Lock lock(client(), name, {.ttl = 150ms, .on_lost = losses.callback()});  // renewed every 50 ms
  for (int round = 0; round < 8; ++round) {
    ASSERT_TRUE(lock.try_lock());
    const std::string token = raw({"GET", name}).str;
    // Unlock at different phases of the 50 ms renewal period.
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + 3 * round));
    lock.unlock();
    ASSERT_EQ(lock.last_unlock_error(), nullptr) << "round " << round;
    EXPECT_FALSE(exists(name)) << "round " << round;
    // Put our old token back with a short life: a renewal still running for
    // the unlocked lease would keep extending it (PEXPIRE GT 150 ms).
    ASSERT_TRUE(raw({"SET", name, token, "PX", "40"}).is("OK"));
    const auto put = Clock::now();
    ASSERT_TRUE(eventually(400ms, [&] { return !exists(name); }))
        << "round " << round << ": a renewal kept the released lease alive for " << ms_since(put) << " ms";
    std::this_thread::sleep_for(60ms);  // at least one more renewal period
    EXPECT_FALSE(exists(name)) << "round " << round;
  }
  EXPECT_EQ(losses.count(), 0u);
}

// ------------------------------------------------------- killed holders

// Starts a `hold` worker and waits until it owns `name`.
Child start_holder(const std::string& url, const std::string& name, long long ttl_ms) {
  Child child = spawn(worker_argv("hold", {url, name, std::to_string(ttl_ms)}));
  if (!child.wait_for_output("acquired", 10s))
    ADD_FAILURE() << "the holder did not acquire: " << child.stdout_text() << child.stderr_text();
  return child;
}

TEST_F(LockRenewal, SigkilledHolderIsReplacedByAThreadWithinTheTtl) {
  const std::string name = key("lock");
  constexpr long long kTtlMs = 1000;
  Child holder = start_holder(server().url(), name, kTtlMs);
  ASSERT_TRUE(exists(name));
  std::this_thread::sleep_for(200ms);  // let it renew at least once

  Lock lock(client(), name);
  EXPECT_FALSE(lock.try_lock());
  holder.kill(SIGKILL);
  const auto killed = Clock::now();
  ASSERT_TRUE(lock.try_lock_for(5s)) << "the dead holder's lease never ended";
  const long long took = ms_since(killed);
  std::cout << "acquired " << took << " ms after SIGKILL of the holder (ttl " << kTtlMs << " ms)\n";
  EXPECT_LE(took, kTtlMs + 200);
  EXPECT_EQ(holder.wait(5s).signal, SIGKILL);
  EXPECT_TRUE(lock.owned());
}

TEST_F(LockRenewal, SigkilledHolderIsReplacedByAWaitingProcessWithinTheTtl) {
  const std::string name = key("lock");
  constexpr long long kTtlMs = 1000;
  Child holder = start_holder(server().url(), name, kTtlMs);
  Child waiter = spawn(worker_argv("wait_acquire", {server().url(), name, "8000"}));
  ASSERT_TRUE(waiter.wait_for_output("ready", 10s)) << waiter.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 1; })) << "the waiter never queued";

  holder.kill(SIGKILL);
  const long long killed_ns = now_ns();
  const ProcessResult result = waiter.wait(10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  std::istringstream words(result.out.substr(result.out.find("ready\n") + 6));
  std::string word;
  long long acquired_ns = 0;
  words >> word >> acquired_ns;
  ASSERT_EQ(word, "acquired") << result.describe();
  const long long took_ms = (acquired_ns - killed_ns) / 1'000'000;
  std::cout << "waiting process acquired " << took_ms << " ms after SIGKILL of the holder (ttl " << kTtlMs
            << " ms)\n";
  EXPECT_GE(took_ms, 0);
  EXPECT_LE(took_ms, kTtlMs + 200);
  EXPECT_FALSE(exists(name));  // the waiter released before exiting
  EXPECT_EQ(queue_length(name), 0);
}

}  // namespace
}  // namespace lockon::test
