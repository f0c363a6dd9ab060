// integration/test_async_release_faults.cpp — AsyncLock's release that does
// not run (core/release.hpp, shared with Lock: test_release_faults.cpp): the
// holder is told (the lease is lost, last_unlock_error()), and the
// background clean-up frees K, which must not stay held by a token nobody
// holds for its TTL.
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "protocol/lock_scripts.hpp"
#include "integration/release_faults_support.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncReleaseFaults : public RedisTest {};

TEST_F(AsyncReleaseFaults, ARefusedReleaseIsReportedAndTheCleanUpFreesTheKey) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 30s});
  int refused = -1;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock_for(1s));
    refused = refuse_script(proxy, detail::scripts::release());
    co_await lock.async_unlock();
  }));
  EXPECT_EQ(proxy.matched(refused), 1u) << "the release was not the one refused: the test proved nothing";
  EXPECT_TRUE(lock.lost()) << "a release that did not run left the lease looking safe";
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), ReplyError);
  // The async clean-up runs on the client's executor.
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    io.restart();
    io.run_for(10ms);
    freed = server().command({"EXISTS", name}).integer == 0;
  }
  EXPECT_TRUE(freed) << "K stays held by a token nobody holds (PTTL " << server().command({"PTTL", name}).integer
                     << " ms)";
}

// unlock() returns before its release ran. With a custom token, an
// acquisition started meanwhile must not run ahead of that release's
// clean-up: the release is refused, its clean-up frees K, and the new
// acquisition must come after it — not fail because K still holds its own
// token, nor be freed by the clean-up afterwards (two holders).
TEST_F(AsyncReleaseFaults, AnAcquisitionWithTheSameTokenWaitsForTheReleaseStillRunning) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  const std::string token = "release-then-lock-token";
  AsyncLock lock(client, name, LockOptions{.ttl = 30s, .token = token});
  int refused = -1;
  bool reacquired = false;
  std::string failure;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock_for(1s));
    refused = refuse_script(proxy, detail::scripts::release());
    lock.unlock_detached();  // the release starts and awaits its reply
    try {
      reacquired = co_await lock.async_try_lock_for(2s);
    } catch (const Error& error) {
      failure = error.what();
    }
  }));
  EXPECT_EQ(proxy.matched(refused), 1u) << "the release was not the one refused: the test proved nothing";
  EXPECT_EQ(failure, "");
  ASSERT_TRUE(reacquired);
  // Whatever clean-up the refused release left must not free K now.
  for (int i = 0; i < 50; ++i) {
    io.restart();
    io.run_for(10ms);
  }
  EXPECT_TRUE(lock.held());
  EXPECT_FALSE(lock.lost());
  EXPECT_EQ(server().command({"GET", name}).str, token) << "K was freed under its holder";
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_unlock(); }));
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
}

TEST_F(AsyncReleaseFaults, AReleaseOfAKeyTakenOverIsLockNotOwned) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 30s});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock_for(1s));
    take_over(server(), name);
    co_await lock.async_unlock();
  }));
  expect_released_a_taken_key(lock, server(), name);
}

}  // namespace
}  // namespace lockon::test
