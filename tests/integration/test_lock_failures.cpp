// integration/test_lock_failures.cpp — Lock when things go wrong: redis-py
// style clients on the same key, keys of the wrong type, bad input, locks
// without expiry, a server that goes away, durations beyond the clock.
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

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

class LockFailures : public ClientTest {
 protected:
  void TearDown() override {
    // Even a failed test leaves the server usable for the next one.
    if (!server().running()) server().restart();
  }
  std::string value(const std::string& name) { return raw({"GET", name}).str; }
  long long queue_length(const std::string& name) {
    return raw({"LLEN", detail::companion_key(name, "q")}).integer;
  }
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
  EXPECT_THROW(Lock(client(), name, {.handoff_spin = -1us}), ConfigError);
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
