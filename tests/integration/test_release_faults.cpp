// integration/test_release_faults.cpp — a Lock's release that does not run,
// or whose answer does not come by the caller's bound (core/release.hpp):
// the holder is told (the lease is lost, last_unlock_error()), and the
// background clean-up frees K, which must not stay held by a token nobody
// holds for its TTL. The async front: test_async_release_faults.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "protocol/lock_scripts.hpp"
#include "integration/release_faults_support.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// unlock_until is MultiLock's give-back's (protected): named through a
// derived class, as multi/give_back.hpp does.
struct Bounded : DistributedLock {
  static void unlock_by(DistributedLock& lock, Clock::time_point bound) noexcept {
    (lock.*(&Bounded::unlock_until))(bound);
  }
};

class ReleaseFaults : public RedisTest {
 protected:
  bool key_freed(const std::string& name) {
    return eventually(3s, [&] { return server().command({"EXISTS", name}).integer == 0; });
  }
};

TEST_F(ReleaseFaults, ARefusedReleaseIsReportedAndTheCleanUpFreesTheKey) {
  FaultProxy proxy(server().host(), server().port());
  const std::string name = key("lock");
  Lock lock(Client(proxy.url()), name, {.ttl = 30s});
  ASSERT_TRUE(lock.try_lock());
  const int refused = refuse_script(proxy, detail::scripts::release());
  lock.unlock();
  EXPECT_EQ(proxy.matched(refused), 1u) << "the release was not the one refused: the test proved nothing";
  EXPECT_FALSE(lock.held());
  EXPECT_TRUE(lock.lost()) << "a release that did not run left the lease looking safe";
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), ReplyError);
  EXPECT_TRUE(key_freed(name)) << "K stays held by a token nobody holds (PTTL "
                               << server().command({"PTTL", name}).integer << " ms)";
}

TEST_F(ReleaseFaults, AReleaseUnansweredByItsBoundReturnsThenTheCleanUpFreesTheKey) {
  FaultProxy proxy(server().host(), server().port());
  const std::string name = key("lock");
  Lock lock(Client(proxy.url()), name, {.ttl = 30s});
  ASSERT_TRUE(lock.try_lock());
  const int swallowed = proxy.add_rule({.command = "EVALSHA",
                                        .argument_contains = detail::scripts::release().sha(),
                                        .action = FaultAction::blackhole,
                                        .times = 1});
  const auto began = std::chrono::steady_clock::now();
  Bounded::unlock_by(lock, began + 200ms);
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(proxy.matched(swallowed), 1u) << "the release was not the one swallowed: the test proved nothing";
  EXPECT_LT(took, 200ms + 500ms) << "unlock_until outlived its bound";
  EXPECT_TRUE(lock.lost()) << "an unconfirmed release left the lease looking safe";
  EXPECT_EQ(lock.last_unlock_error(), nullptr) << "the caller chose not to wait: not an error";
  EXPECT_TRUE(key_freed(name)) << "K stays held by a token nobody holds (PTTL "
                               << server().command({"PTTL", name}).integer << " ms)";
}

TEST_F(ReleaseFaults, AReleaseOfAKeyTakenOverIsLockNotOwned) {
  const std::string name = key("lock");
  Lock lock(Client(server().url()), name, {.ttl = 30s});
  ASSERT_TRUE(lock.try_lock());
  take_over(server(), name);
  lock.unlock();
  expect_released_a_taken_key(lock, server(), name);
}

}  // namespace
}  // namespace lockon::test
