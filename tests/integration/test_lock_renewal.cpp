// integration/test_lock_renewal.cpp — the lease over its life: the watchdog
// (automatic renewal, loss detection, max_hold, no renewal after unlock),
// holders that die without releasing (SIGKILLed worker processes), and
// failures: redis-py-style clients on the same key, WRONGTYPE keys, bad
// input, locks without expiry, a server that goes away.
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

#include "lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}


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
  EXPECT_TRUE(lock.lost_token().stop_requested());
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

TEST_F(LockRenewal, UnreachableServerIsReportedOnceTheLeaseCouldHaveLapsed) {
  const std::string name = key("lock");
  LossLog losses;
  const Client impatient(server().url() + "?socket_timeout=200ms");
  Lock lock(impatient, name, {.ttl = 600ms, .on_lost = losses.callback()});
  ASSERT_TRUE(lock.try_lock());
  const auto acquired = Clock::now();
  server().pause();  // renewals now time out
  const bool lost = eventually(3s, [&] { return lock.lost(); });
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

// ------------------------------------------------------------ failures
//
// Other clients on the same key, keys of the wrong type, bad input, no
// expiry, and a server that goes away.

// What redis-py's Lock sends: SET NX PX to acquire, compare-and-delete to release.
constexpr const char* kRedisPyRelease =
    "local token = redis.call('get', KEYS[1])\n"
    "if not token or token ~= ARGV[1] then return 0 end\n"
    "redis.call('del', KEYS[1])\n"
    "return 1\n";
constexpr const char* kForeignToken = "6f1c2a4e9b7d4c1f8e2a3b5c7d9e0f12";  // a uuid4().hex

class LockFailures : public LockRenewal {
 protected:
  void TearDown() override {
    // Even a failed test leaves the server usable for the next one.
    if (!server().running()) server().restart();
  }
  std::string value(const std::string& name) { return raw({"GET", name}).str; }
};

// ------------------------------------------------ other clients, bad keys

TEST_F(LockFailures, WireCompatibleWithARedisPyStyleClient) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  // redis-py holds it: lockon is excluded.
  ASSERT_TRUE(raw({"SET", name, kForeignToken, "NX", "PX", "10000"}).is("OK"));
  EXPECT_FALSE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock_for(100ms));
  EXPECT_TRUE(lock.locked());
  EXPECT_EQ(value(name), kForeignToken);
  // redis-py releases with its compare-and-delete: lockon gets it.
  EXPECT_EQ(raw({"EVAL", kRedisPyRelease, "1", name, kForeignToken}).integer, 1);
  ASSERT_TRUE(lock.try_lock());
  // lockon's key is a plain string token with a PX expiry, as redis-py expects.
  EXPECT_EQ(raw({"TYPE", name}).str, "string");
  EXPECT_GT(pttl(name), 0);
  EXPECT_TRUE(raw({"SET", name, kForeignToken, "NX", "PX", "10000"}).is_nil());
  EXPECT_EQ(raw({"EVAL", kRedisPyRelease, "1", name, kForeignToken}).integer, 0);
  EXPECT_TRUE(lock.owned());
  lock.release();
  EXPECT_FALSE(exists(name));
}

TEST_F(LockFailures, WrongTypeKeyThrowsAndIsLeftUntouched) {
  flush();
  const std::string name = key("lock");
  ASSERT_EQ(raw({"HSET", name, "field", "value"}).integer, 1);
  Lock lock(client(), name);
  try {
    lock.try_lock();
    ADD_FAILURE() << "acquired a hash";
  } catch (const WrongTypeError& error) {
    EXPECT_EQ(error.code(), "WRONGTYPE");
  }
  EXPECT_THROW(lock.try_lock_for(100ms), WrongTypeError);
  EXPECT_THROW(lock.lock(), WrongTypeError);
  EXPECT_FALSE(lock.held());
  EXPECT_EQ(raw({"TYPE", name}).str, "hash");
  const RawReply all = raw({"HGETALL", name});
  ASSERT_EQ(all.elements.size(), 2u) << all.to_string();
  EXPECT_EQ(all.elements[0].str, "field");
  EXPECT_EQ(all.elements[1].str, "value");
  EXPECT_EQ(pttl(name), -1);
  EXPECT_EQ(raw({"DBSIZE"}).integer, 1);  // no queue or fence keys left behind
}

// ------------------------------------------------------------ bad input

TEST_F(LockFailures, InvalidOptionsThrowConfigErrorAndWriteNothing) {
  flush();
  const std::string name = key("lock");
  EXPECT_THROW(Lock(client(), ""), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.ttl = 0ms}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.ttl = -1ms}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.ttl = std::chrono::milliseconds((1LL << 47) + 1)}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.ttl = std::chrono::milliseconds::max()}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.token = std::string()}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.wait_poll_interval = 0ms}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.wait_poll_interval = -1ms}), ConfigError);
  EXPECT_THROW(Lock(client(), name, {.max_hold = -1ms}), ConfigError);
  try {
    Lock lock(client(), name, {.ttl = 0ms});
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
  }
  EXPECT_EQ(raw({"DBSIZE"}).integer, 0);
  // The limit itself is fine.
  Lock longest(client(), name, {.ttl = std::chrono::milliseconds(1LL << 47), .auto_renew = false});
  ASSERT_TRUE(longest.try_lock());
  EXPECT_GT(pttl(name), (1LL << 47) - 10000);
}

TEST_F(LockFailures, NoExpiryLockHasNoTtl) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 0ms, .no_expiry = true});  // ttl ignored
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(pttl(name), -1);
  EXPECT_EQ(lock.remaining_ttl(), std::chrono::milliseconds::max());
  EXPECT_THROW(lock.extend(1s), LockError);
  EXPECT_THROW(lock.reacquire(), LockError);
  EXPECT_EQ(pttl(name), -1);
  EXPECT_TRUE(lock.owned());
  lock.release();
  EXPECT_FALSE(exists(name));
}

// --------------------------------------------------------- server down

TEST_F(LockFailures, StoppedServerThrowsIoErrorNotFalseAndRecoversAfterRestart) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());  // the pool now holds a live connection
  lock.release();

  server().kill();
  for (int attempt = 0; attempt < 2; ++attempt) {  // stale connection, then a refused one
    try {
      const bool acquired = lock.try_lock();
      ADD_FAILURE() << "try_lock returned " << acquired << " with the server down";
    } catch (const ConnectError&) {
    } catch (const ClosedError&) {
    } catch (const IoError& error) {
      ADD_FAILURE() << "expected ConnectError or ClosedError: " << error.what();
    }
  }
  EXPECT_THROW(lock.try_lock_for(100ms), IoError);
  EXPECT_THROW(lock.locked(), IoError);
  EXPECT_FALSE(lock.held());

  server().restart();
  raw_ = std::make_unique<RawConnection>(server().connect());
  ASSERT_TRUE(lock.try_lock());
  EXPECT_TRUE(lock.owned());
  EXPECT_GT(pttl(name), 0);
  lock.release();
  EXPECT_FALSE(exists(name));
}

TEST_F(LockFailures, UnlockWithTheServerDownRecordsAnIoError) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());
  server().kill();
  lock.unlock();  // noexcept: the key would expire by its TTL
  EXPECT_FALSE(lock.held());
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), IoError);
  server().restart();
}

// EVAL + EVALSHA calls the server has run so far (INFO commandstats).
long long script_calls(RawConnection& raw) {
  const std::string info = raw.command({"INFO", "commandstats"}).str;
  long long calls = 0;
  for (const std::string command : {"cmdstat_eval:", "cmdstat_evalsha:"}) {
    const auto at = info.find(command);
    if (at != std::string::npos) calls += std::stoll(info.substr(at + command.size() + 6));  // "calls="
  }
  return calls;
}

// Durations beyond steady_clock's nanosecond range (~292 years) are valid
// options; they must mean "very long", never wrap into the past.
TEST_F(LockFailures, HugeDurationsNeitherOverflowNorSpin) {
  const std::string name = key("lock");
  const auto centuries = std::chrono::milliseconds(std::chrono::hours(24 * 365 * 300));
  {
    Lock holder(client(), name);
    ASSERT_TRUE(holder.try_lock());
    for (const auto poll : {centuries, std::chrono::milliseconds::max()}) {
      Lock waiter(client(), name, {.wait_poll_interval = poll});
      const long long calls_before = script_calls(*raw_);
      const auto start = Clock::now();
      EXPECT_FALSE(waiter.try_lock_for(300ms));
      const long long waited = ms_since(start);
      EXPECT_GE(waited, 290);
      EXPECT_LE(waited, 400);
      // Queued attempt and cancel: a handful, not a busy loop.
      EXPECT_LE(script_calls(*raw_) - calls_before, 10) << "poll " << poll.count() << " ms";
    }
  }
  {  // A holder whose poll interval is huge still hands over to a waiter.
    Lock holder(client(), name, {.wait_poll_interval = std::chrono::milliseconds::max()});
    ASSERT_TRUE(holder.try_lock());
    std::atomic<bool> acquired{false};
    std::thread waiter([&] {
      Lock lock(client(), name);
      acquired = lock.try_lock_for(5s);
    });
    const bool queued = eventually(5s, [&] { return queue_length(name) == 1; });
    EXPECT_NO_THROW(holder.release());
    waiter.join();
    EXPECT_TRUE(queued);
    EXPECT_TRUE(acquired.load());
  }
  {  // The longest ttl: the watchdog idles, a waiter sleeps.
    Lock longest(client(), name, {.ttl = std::chrono::milliseconds(1LL << 47)});
    ASSERT_TRUE(longest.try_lock());
    long long calls_before = script_calls(*raw_);
    std::this_thread::sleep_for(300ms);
    EXPECT_LE(script_calls(*raw_) - calls_before, 2) << "the watchdog renews a 2^47 ms lease in a loop";
    Lock waiter(client(), name);
    calls_before = script_calls(*raw_);
    EXPECT_FALSE(waiter.try_lock_for(300ms));
    EXPECT_LE(script_calls(*raw_) - calls_before, 10) << "a waiter spins on a 2^47 ms lease";
    EXPECT_FALSE(longest.lost());
  }
  {  // max_hold of "forever" renews like no max_hold at all.
    Lock held(client(), key("held"), {.ttl = 300ms, .max_hold = std::chrono::milliseconds::max()});
    ASSERT_TRUE(held.try_lock());
    std::this_thread::sleep_for(700ms);
    EXPECT_FALSE(held.lost());
    EXPECT_TRUE(held.owned());
  }
}

}  // namespace
}  // namespace lockon::test
