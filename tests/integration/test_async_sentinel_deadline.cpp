// integration/test_async_sentinel_deadline.cpp — an AsyncClient on
// Sentinel resolves the master on its first request; a sentinel that
// answers nothing must not hold a timed acquisition past its deadline. The
// resolution asked each sentinel for a whole step (connect + socket
// timeout, 2 s by default) whatever the caller's deadline (found by
// review, session 18).
#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"
#include "support/sentinel_fixture.hpp"

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

// A caller with a short deadline must not cut the resolution short for the
// others: it runs on its own, and each caller waits for it until its own
// deadline. Run within the first caller's 5 ms, it failed an async_lock()
// waiting behind it, and callers with short deadlines never resolved at
// all (found by review of the fix above, session 18).
TEST(AsyncSentinelDeadline, AShortDeadlineDoesNotCutTheResolutionShortForOthers) {
  SentinelSet set;
  FaultProxy slow(std::string("127.0.0.1"), set.sentinel_port(0));
  slow.set_latency(20ms);  // each question to the sentinel: ~40 ms and more
  asio::io_context io;
  AsyncClient client(io.get_executor(), "redis-sentinel://127.0.0.1:" + std::to_string(slow.port()) + "#" +
                                            SentinelSet::kMasterName);
  AsyncLock hurried(client, "sentinel-deadline:a", LockOptions{.ttl = 5s});
  AsyncLock patient(client, "sentinel-deadline:b", LockOptions{.ttl = 5s});
  std::string patient_error;
  bool patient_got = false;
  int short_tries = 0;
  bool short_got = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    // The hurried caller starts the resolution; the patient one waits behind it.
    asio::co_spawn(co_await asio::this_coro::executor, [&]() -> asio::awaitable<void> {
      try {
        co_await hurried.async_try_lock_for(5ms);
      } catch (const Error&) {
      }
    }, asio::detached);
    try {
      co_await patient.async_lock();
      patient_got = true;
      co_await patient.async_unlock();
    } catch (const Error& e) {
      patient_error = e.what();
    }
    // Short deadlines only: the client resolves all the same.
    for (; short_tries < 40 && !short_got; ++short_tries) {
      try {
        short_got = co_await hurried.async_try_lock_for(5ms);
      } catch (const Error&) {
      }
    }
    if (short_got) co_await hurried.async_unlock();
  }, 30s));
  EXPECT_TRUE(patient_got) << "async_lock() behind a 5 ms caller's resolution: " << patient_error;
  EXPECT_TRUE(short_got) << "5 ms callers never got the master resolved (" << short_tries << " tries)";
}

}  // namespace
}  // namespace lockon::test
