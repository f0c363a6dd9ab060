// integration/test_async_sentinel_deadline.cpp — an AsyncClient on
// Sentinel resolves the master on its first request; a sentinel that
// answers nothing must not hold a timed acquisition past its deadline. The
// resolution asked each sentinel for a whole step (connect + socket
// timeout, 2 s by default) whatever the caller's deadline (found by
// review, session 18).
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(AsyncSentinelDeadline, ASilentSentinelDoesNotHoldATimedAcquisitionPastItsDeadline) {
  RedisServer stand_in;  // what the proxy would forward to; it forwards nothing
  FaultProxy sentinel(stand_in.host(), stand_in.port());
  sentinel.blackhole(true);
  asio::io_context io;
  AsyncClient client(io.get_executor(), "redis-sentinel://127.0.0.1:" + std::to_string(sentinel.port()) + "#mymaster");
  AsyncLock lock(client, "sentinel-deadline:lock", LockOptions{.ttl = 5s});
  bool acquired = true;
  std::string error;
  const auto start = Clock::now();
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      acquired = co_await lock.async_try_lock_for(100ms);
    } catch (const Error& e) {
      acquired = false;
      error = e.what();
    }
  }, 10s));
  const long long took = ms_since(start);
  EXPECT_FALSE(acquired);
  EXPECT_LT(took, 100 + 250) << "async_try_lock_for(100 ms) took " << took << " ms (a step is 2,000 ms)"
                             << (error.empty() ? "" : ": " + error);
}

}  // namespace
}  // namespace lockon::test
