// integration/test_lock_extend.cpp — Lock::extend and Lock::reacquire
// against a real server (from redis-py's tests/test_lock.py): adding to or
// replacing the TTL, fractional seconds, and their errors.
#include <chrono>
#include <limits>
#include <string>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockExtend : public ClientTest {};

TEST_F(LockExtend, ExtendAddsToTheRemainingTtl) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  lock.extend(10s);
  EXPECT_GT(pttl(name), 19000);
  EXPECT_LE(pttl(name), 20000);
}

TEST_F(LockExtend, ExtendCanReplaceTheTtl) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  lock.extend(5s, true);
  EXPECT_GT(pttl(name), 4000);
  EXPECT_LE(pttl(name), 5000);
}

TEST_F(LockExtend, ExtendWithFractionalSeconds) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 500ms, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  lock.extend(500ms);
  EXPECT_GT(pttl(name), 900);
  EXPECT_LE(pttl(name), 1000);
  lock.extend(250ms, true);
  EXPECT_GT(pttl(name), 150);
  EXPECT_LE(pttl(name), 250);
}

TEST_F(LockExtend, ExtendErrors) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s});
  try {
    lock.extend(1s);
    ADD_FAILURE() << "extended an unlocked lock";
  } catch (const LockNotOwned&) {
    ADD_FAILURE() << "an unlocked lock is misuse (LockError), not LockNotOwned";
  } catch (const LockError& error) {
    EXPECT_EQ(error.name(), name);
  }
  ASSERT_TRUE(lock.try_lock());
  EXPECT_THROW(lock.extend(0ms), ConfigError);
  EXPECT_THROW(lock.extend(-5ms), ConfigError);
  // Past what Redis can expire: a typed error before anything is sent (it
  // was Redis' own error reply, a ReplyError), and the lease is intact.
  const long long ttl_before = raw({"PTTL", name}).integer;
  EXPECT_THROW(lock.extend(std::chrono::milliseconds(std::numeric_limits<long long>::max())), ConfigError);
  EXPECT_THROW(lock.extend(std::chrono::milliseconds((1LL << 47) + 1), true), ConfigError);
  EXPECT_LE(raw({"PTTL", name}).integer, ttl_before);
  EXPECT_TRUE(lock.owned());
  EXPECT_FALSE(lock.lost());
  ASSERT_TRUE(raw({"SET", name, "someone-else"}).is("OK"));
  try {
    lock.extend(1s);
    ADD_FAILURE() << "extended someone else's lock";
  } catch (const LockNotOwned& error) {
    EXPECT_EQ(error.name(), name);
  }
  EXPECT_EQ(value(name), "someone-else");
  EXPECT_EQ(pttl(name), -1);  // untouched
  EXPECT_TRUE(lock.lost()) << "told LockNotOwned, yet lost() waits for the old lease end (session 18)";

  const std::string forever = key("forever");
  Lock no_expiry(client(), forever, {.no_expiry = true});
  ASSERT_TRUE(no_expiry.try_lock());
  try {
    no_expiry.extend(1s);
    ADD_FAILURE() << "extended a lock without expiry";
  } catch (const LockError& error) {
    EXPECT_EQ(error.name(), forever);
  }
  EXPECT_EQ(pttl(forever), -1);
}

TEST_F(LockExtend, ReacquireResetsTheTtl) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(raw({"PEXPIRE", name, "1000"}).integer, 1);
  lock.reacquire();
  EXPECT_GT(pttl(name), 9000);
  EXPECT_LE(pttl(name), 10000);
  lock.extend(20s, true);
  lock.reacquire();  // back to ttl, not max(ttl, remaining)
  EXPECT_LE(pttl(name), 10000);
}

TEST_F(LockExtend, ReacquireErrors) {
  const std::string name = key("lock");
  Lock lock(client(), name, {.ttl = 10s});
  EXPECT_THROW(lock.reacquire(), LockError);  // not held
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(raw({"DEL", name}).integer, 1);
  try {
    lock.reacquire();
    ADD_FAILURE() << "reacquired a deleted lock";
  } catch (const LockNotOwned& error) {
    EXPECT_EQ(error.name(), name);
  }
  EXPECT_FALSE(exists(name));  // not recreated
  EXPECT_TRUE(lock.lost()) << "told LockNotOwned, yet lost() waits for the old lease end (session 18)";

  const std::string forever = key("forever");
  Lock no_expiry(client(), forever, {.no_expiry = true});
  ASSERT_TRUE(no_expiry.try_lock());
  try {
    no_expiry.reacquire();
    ADD_FAILURE() << "reacquired a lock without expiry";
  } catch (const LockNotOwned&) {
    ADD_FAILURE() << "a no-expiry lock is misuse (LockError), not LockNotOwned";
  } catch (const LockError& error) {
    EXPECT_EQ(error.name(), forever);
  }
}

}  // namespace
}  // namespace lockon::test
