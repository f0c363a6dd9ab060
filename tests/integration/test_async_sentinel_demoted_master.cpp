// integration/test_async_sentinel_demoted_master.cpp — issue 33, the Asio
// front's half of test_sentinel_demoted_master.cpp: when the server the
// sentinels name is a replica, every async acquisition failed at once with
// READONLY (a caller that retries on errors spun against the replica)
// instead of waiting within its deadline for a master, as the blocking
// front does. Both fronts now follow one rule (client/retry_rules.hpp,
// ReadOnlyRetry).
//
// Set-up: real master, replica and 3 sentinels; the master demoted by hand
// (REPLICAOF its own replica), which the sentinels go on naming for far
// longer than the test; then REPLICAOF NO ONE within a waiting call's
// deadline.
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "integration/sentinel_failover_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/fixtures.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One async_try_lock_for(wait) on a fresh AsyncLock: whether it acquired
// (and released), and whether it failed with a typed error instead.
struct Try {
  bool acquired = false;
  bool typed_error = false;
  std::string error;
};
Try try_once(asio::io_context& io, AsyncClient& client, const std::string& name, std::chrono::milliseconds wait) {
  Try result;
  AsyncLock lock(client, name, LockOptions{.ttl = 5s});
  const bool finished = run_on(io, [&]() -> asio::awaitable<void> {
    try {
      result.acquired = co_await lock.async_try_lock_for(wait);
      if (result.acquired) co_await lock.async_unlock();
    } catch (const ReadOnlyError& e) {
      result.typed_error = true;
      result.error = e.what();
    } catch (const ConnectError& e) {
      result.typed_error = true;  // "not a master (ROLE)": the sentinels' answer, refused
      result.error = e.what();
    }
  }, 30s);
  EXPECT_TRUE(finished) << "async_try_lock_for(" << wait.count() << " ms) did not finish in 30 s";
  return result;
}

TEST(AsyncSentinelDemotedMaster, ReadOnlyWaitsForAMasterWithinTheDeadlineAndTakesItBack) {
  SentinelSet set;
  asio::io_context io;
  AsyncClient client(io.get_executor(), set.url(kShortTimeouts));
  const std::string name = unique_key("async-demoted");
  ASSERT_TRUE(try_once(io, client, name, 2000ms).acquired);  // resolved, connected

  set.master().command({"REPLICAOF", "127.0.0.1", std::to_string(set.replica().port())});
  ASSERT_TRUE(is_replica(set.master()));

  // One second of async_try_lock_for(200 ms): each call waits for a master
  // with a back-off (1 ms doubling to 100 ms) until the next pause would
  // pass its deadline, and ends with a typed error; none fails at once.
  constexpr auto kWait = 200ms;
  int calls = 0;
  int typed = 0;
  long long longest_ms = 0;
  long long shortest_ms = 1'000'000;
  const auto start = Clock::now();
  while (Clock::now() - start < 1s && calls < 1000) {
    ++calls;
    const auto call_start = Clock::now();
    const Try attempt = try_once(io, client, name, kWait);
    EXPECT_FALSE(attempt.acquired) << "nothing is writable";
    if (attempt.typed_error) ++typed;
    const long long took = ms_since(call_start);
    longest_ms = std::max(longest_ms, took);
    shortest_ms = std::min(shortest_ms, took);
  }
  std::cout << calls << " calls in 1 s (" << typed << " typed errors), each " << shortest_ms << "–" << longest_ms
            << " ms for a " << kWait.count() << " ms wait\n";
  EXPECT_LE(calls, 15) << "before: hundreds, each failing at once";
  EXPECT_GE(shortest_ms, 80) << "a call gave up without waiting for a master";
  EXPECT_LE(longest_ms, kWait.count() + 250) << "a call overran its deadline";

  // The master comes back within a waiting call's deadline: the call takes the lock.
  std::jthread undo([&] {
    std::this_thread::sleep_for(300ms);
    set.master().command({"REPLICAOF", "NO", "ONE"});
  });
  const auto waited_from = Clock::now();
  const Try back = try_once(io, client, name, 3000ms);
  EXPECT_TRUE(back.acquired) << "the master came back 300 ms into a 3 s wait: " << back.error;
  EXPECT_GE(ms_since(waited_from), 250) << "it had to wait for the master";
}

}  // namespace
}  // namespace lockon::test
