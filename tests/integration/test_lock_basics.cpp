// integration/test_lock_basics.cpp — lockon::Lock against a real server: the
// C++ port of redis-py's tests/test_lock.py: token, locked/owned, timeouts,
// blocking timeout, guards (LockGuard and the std:: adapters),
// release/unlock and their errors (extend/reacquire: test_lock_extend.cpp). Wire compatibility,
// WRONGTYPE keys, bad input and server failures are in test_lock_renewal.cpp.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <concepts>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// TimedLockable, checked at compile time (std::unique_lock & co. rely on it).
template <class L>
concept TimedLockable = requires(L& l) {
  l.lock();
  { l.try_lock() } -> std::same_as<bool>;
  l.unlock();
  { l.try_lock_for(1ms) } -> std::same_as<bool>;
  { l.try_lock_until(Clock::now()) } -> std::same_as<bool>;
};
static_assert(TimedLockable<Lock>);
static_assert(TimedLockable<DistributedLock>);
static_assert(noexcept(std::declval<Lock&>().unlock()));
static_assert(!std::is_copy_constructible_v<Lock>);

class LockBasics : public ClientTest {};

// ---------------------------------------------------------------- tokens

TEST_F(LockBasics, TokenIsRandom128BitHexAndFreshPerAcquisition) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());
  const std::string first = value(name);
  // 128 random bits in hex, then the process's nonce (common/token.hpp)
  EXPECT_TRUE(is_lock_token(first)) << first;
  EXPECT_TRUE(lock.owned());
  lock.release();
  EXPECT_FALSE(exists(name));

  ASSERT_TRUE(lock.try_lock());
  const std::string second = value(name);
  EXPECT_TRUE(is_lock_token(second)) << second;
  EXPECT_NE(first, second);
  lock.release();

  Lock other(client(), name);
  ASSERT_TRUE(other.try_lock());
  EXPECT_NE(value(name), first);
  EXPECT_NE(value(name), second);
}

TEST_F(LockBasics, CustomTokenIsStoredAndReleasedByIt) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.token = std::string("my-own-token")});
  ASSERT_TRUE(lock.try_lock());
  EXPECT_EQ(value(name), "my-own-token");
  EXPECT_TRUE(lock.owned());
  lock.release();
  EXPECT_FALSE(exists(name));
}

// ------------------------------------------------------- locked / owned

TEST_F(LockBasics, LockedReportsAnyHolder) {
  const std::string name = key("lock");
  Lock a(client(), name);
  Lock b(client(), name);
  EXPECT_FALSE(a.locked());
  ASSERT_TRUE(a.try_lock());
  EXPECT_TRUE(a.locked());
  EXPECT_TRUE(b.locked());
  a.release();
  EXPECT_FALSE(a.locked());
  EXPECT_FALSE(b.locked());
}

TEST_F(LockBasics, OwnedDistinguishesTwoObjectsWithTheSameName) {
  const std::string name = key("lock");
  Lock a(client(), name);
  Lock b(client(), name);
  EXPECT_FALSE(a.owned());
  ASSERT_TRUE(a.try_lock());
  EXPECT_TRUE(a.owned());
  EXPECT_FALSE(b.owned());
  a.release();
  ASSERT_TRUE(b.try_lock());
  EXPECT_FALSE(a.owned());
  EXPECT_TRUE(b.owned());
  ASSERT_EQ(raw({"DEL", name}).integer, 1);
  EXPECT_FALSE(b.owned());  // a round trip, not the local state
  EXPECT_TRUE(b.held());
}

TEST_F(LockBasics, CompetingLocks) {
  const std::string name = key("lock");
  Lock a(client(), name);
  Lock b(client(), name);
  ASSERT_TRUE(a.try_lock());
  EXPECT_FALSE(b.try_lock());
  EXPECT_FALSE(b.try_lock_for(0ms));
  EXPECT_FALSE(b.held());
  a.release();
  EXPECT_TRUE(b.try_lock());
  EXPECT_FALSE(a.try_lock());
  b.release();
}

// ------------------------------------------------------------- timeouts

TEST_F(LockBasics, TtlSetsThePttl) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s});
  ASSERT_TRUE(lock.try_lock());
  const long long left = pttl(name);
  EXPECT_GT(left, 9000);
  EXPECT_LE(left, 10000);
  const auto remaining = lock.remaining_ttl();
  ASSERT_TRUE(remaining.has_value());
  EXPECT_GT(*remaining, 9000ms);
  EXPECT_LE(*remaining, 10000ms);
  lock.release();
  EXPECT_FALSE(lock.remaining_ttl().has_value());
}

TEST_F(LockBasics, FractionalTtlsSetThePttl) {
  for (const auto ttl : {500ms, 1500ms}) {
    const std::string name = key("lock");
    Lock lock(client(), name, {.ttl = ttl, .auto_renew = false});
    ASSERT_TRUE(lock.try_lock());
    const long long left = pttl(name);
    EXPECT_GT(left, ttl.count() - 100) << ttl.count();
    EXPECT_LE(left, ttl.count()) << ttl.count();
    lock.release();
  }
}

TEST_F(LockBasics, TimeoutBeyondTheClockRangeWaitsInsteadOfFailingAtOnce) {
  const std::string name = key("lock");
  Lock holder(client(), name);
  Lock waiter(client(), name);
  ASSERT_TRUE(holder.try_lock());
  std::thread releaser([&] {
    std::this_thread::sleep_for(300ms);
    holder.unlock();
  });
  const auto start = Clock::now();
  const bool acquired = waiter.try_lock_for(std::chrono::milliseconds::max());
  const long long waited = ms_since(start);
  releaser.join();
  EXPECT_TRUE(acquired);
  EXPECT_GE(waited, 250);
  EXPECT_LE(waited, 2000);
}

TEST_F(LockBasics, BlockingTimeoutIsHonoured) {
  const std::string name = key("lock");
  Lock holder(client(), name);
  Lock waiter(client(), name);
  ASSERT_TRUE(holder.try_lock());

  auto start = Clock::now();
  EXPECT_FALSE(waiter.try_lock_for(200ms));
  long long waited = ms_since(start);
  EXPECT_GE(waited, 190);
  EXPECT_LE(waited, 300);

  // A deadline of another clock is converted, not ignored.
  start = Clock::now();
  EXPECT_FALSE(waiter.try_lock_until(std::chrono::system_clock::now() + 200ms));
  waited = ms_since(start);
  EXPECT_GE(waited, 190);
  EXPECT_LE(waited, 300);

  start = Clock::now();
  EXPECT_FALSE(waiter.try_lock_until(Clock::now() + 200ms));
  waited = ms_since(start);
  EXPECT_GE(waited, 190);
  EXPECT_LE(waited, 300);
  EXPECT_FALSE(waiter.held());
  EXPECT_TRUE(holder.owned());
}

TEST_F(LockBasics, LongPollIntervalNeverOversleepsTheTimeout) {
  const std::string name = key("lock");
  Lock holder(client(), name);
  Lock waiter(client(), name, {.wait_poll_interval = 60s});
  ASSERT_TRUE(holder.try_lock());
  const auto start = Clock::now();
  EXPECT_FALSE(waiter.try_lock_for(1s));
  const long long waited = ms_since(start);
  EXPECT_GE(waited, 990);
  EXPECT_LE(waited, 1100);
}

// --------------------------------------------------------------- guards

TEST_F(LockBasics, LockGuardReleasesOnScopeExit) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  {
    const LockGuard guard(lock);
    EXPECT_TRUE(lock.held());
    EXPECT_TRUE(exists(name));
  }
  EXPECT_FALSE(lock.held());
  EXPECT_FALSE(exists(name));
  {
    const LockGuard guard(lock, 1s);
    EXPECT_TRUE(lock.owned());
  }
  EXPECT_FALSE(exists(name));
}

TEST_F(LockBasics, LockGuardThrowsAcquireTimeoutWhenBusy) {
  const std::string name = key("lock");
  Lock holder(client(), name);
  Lock lock(client(), name);
  ASSERT_TRUE(holder.try_lock());
  const auto start = Clock::now();
  try {
    const LockGuard guard(lock, 100ms);
    ADD_FAILURE() << "acquired a held lock";
  } catch (const AcquireTimeout& error) {
    EXPECT_EQ(error.name(), name);
    EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
  }
  EXPECT_GE(ms_since(start), 90);
  EXPECT_FALSE(lock.held());
  EXPECT_TRUE(holder.owned());
}

TEST_F(LockBasics, StandardLockAdaptersWork) {
  const std::string name_a = key("a");
  const std::string name_b = key("b");
  Lock a(client(), name_a);
  Lock b(client(), name_b);
  {
    std::unique_lock guard(a);
    EXPECT_TRUE(guard.owns_lock());
    EXPECT_TRUE(exists(name_a));
    guard.unlock();
    EXPECT_FALSE(exists(name_a));
    EXPECT_TRUE(guard.try_lock_for(100ms));
  }
  EXPECT_FALSE(exists(name_a));
  {
    std::unique_lock<Lock> guard(a, 100ms);
    EXPECT_TRUE(guard.owns_lock());
    std::unique_lock<Lock> deferred(b, std::defer_lock);
    EXPECT_TRUE(deferred.try_lock_until(Clock::now() + 100ms));
  }
  EXPECT_FALSE(exists(name_a));
  EXPECT_FALSE(exists(name_b));
  {
    const std::scoped_lock both(a, b);
    EXPECT_TRUE(a.owned());
    EXPECT_TRUE(b.owned());
  }
  EXPECT_FALSE(exists(name_a));
  EXPECT_FALSE(exists(name_b));

  // std::lock must back off and retry while one of the two is busy.
  Lock other(client(), name_b);
  ASSERT_TRUE(other.try_lock());
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    other.unlock();
  });
  const auto start = Clock::now();
  std::lock(a, b);
  const long long waited = ms_since(start);
  releaser.join();
  EXPECT_TRUE(a.owned());
  EXPECT_TRUE(b.owned());
  EXPECT_GE(waited, 150);
  EXPECT_LT(waited, 2000);
  a.unlock();
  b.unlock();
  EXPECT_EQ(raw({"EXISTS", name_a, name_b}).integer, 0);
}

// -------------------------------------------------------------- release

TEST_F(LockBasics, ReleaseOfADeletedKeyThrowsLockNotOwned) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(raw({"DEL", name}).integer, 1);
  try {
    lock.release();
    ADD_FAILURE() << "released a lock it no longer owns";
  } catch (const LockNotOwned& error) {
    EXPECT_EQ(error.name(), name);
    EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
  }
  EXPECT_FALSE(lock.held());
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(lock.try_lock());  // usable again
}

TEST_F(LockBasics, ReleaseNeverDeletesAKeyItDoesNotOwn) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 200ms, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  const auto deadline = Clock::now() + 2s;
  while (exists(name) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_FALSE(exists(name)) << "the 200 ms lease did not expire";
  // Another client (redis-py style) takes the lock meanwhile.
  ASSERT_TRUE(raw({"SET", name, kForeignToken, "NX", "PX", "10000"}).is("OK"));
  EXPECT_THROW(lock.release(), LockNotOwned);
  EXPECT_EQ(value(name), kForeignToken);
  EXPECT_GT(pttl(name), 9000);
}

TEST_F(LockBasics, ReleaseOfAReplacedKeyKeepsTheOtherValue) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(raw({"SET", name, "someone-else"}).is("OK"));
  EXPECT_THROW(lock.release(), LockNotOwned);
  EXPECT_EQ(value(name), "someone-else");
}

TEST_F(LockBasics, ReleaseOfANeverAcquiredLockThrowsLockError) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  try {
    lock.release();
    ADD_FAILURE() << "released a lock that was never acquired";
  } catch (const LockNotOwned& error) {
    ADD_FAILURE() << "expected plain LockError (misuse), got LockNotOwned: " << error.what();
  } catch (const LockError& error) {
    EXPECT_EQ(error.name(), name);
  }
  // Someone else's key is not ours to release either.
  Lock other(client(), name);
  ASSERT_TRUE(other.try_lock());
  EXPECT_THROW(lock.release(), LockError);
  EXPECT_TRUE(other.owned());
}

TEST_F(LockBasics, UnlockOfALostLeaseIsNoexceptAndRecordsTheError) {
  const std::string name = key("lock");
  std::mutex mutex;
  std::vector<LossEvent> events;
  Lock lock(client(), name, {.on_lost = [&](const LossEvent& event) {
                               const std::lock_guard guard(mutex);
                               events.push_back(event);
                             }});
  lock.unlock();  // never held: a no-op
  EXPECT_EQ(lock.last_unlock_error(), nullptr);

  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.lost());
  ASSERT_EQ(raw({"DEL", name}).integer, 1);
  lock.unlock();
  EXPECT_FALSE(lock.held());
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(lock.lost_token().stop_requested());
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  try {
    std::rethrow_exception(lock.last_unlock_error());
  } catch (const LockNotOwned& error) {
    EXPECT_EQ(error.name(), name);
  } catch (...) {
    ADD_FAILURE() << "last_unlock_error is not LockNotOwned";
  }
  {
    const std::lock_guard guard(mutex);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].name, name);
    EXPECT_EQ(events[0].reason, LossReason::taken);
  }
  lock.unlock();  // not held any more: nothing happens
  // A fresh acquisition starts a fresh lease and clears the error on success.
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.lost());
  EXPECT_FALSE(lock.lost_token().stop_requested());
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_FALSE(exists(name));
  const std::lock_guard guard(mutex);
  EXPECT_EQ(events.size(), 1u);
}

TEST_F(LockBasics, AcquiringTheSameObjectTwiceThrowsInsteadOfDeadlocking) {
  const std::string name = key("lock");
  Lock lock(client(), name);
  ASSERT_TRUE(lock.try_lock());
  const auto start = Clock::now();
  EXPECT_THROW(lock.try_lock(), LockError);
  EXPECT_THROW(lock.try_lock_for(5s), LockError);
  EXPECT_THROW(lock.lock(), LockError);
  EXPECT_LT(ms_since(start), 1000);
  EXPECT_TRUE(lock.held());
  EXPECT_TRUE(lock.owned());
  lock.release();
}

}  // namespace
}  // namespace lockon::test
