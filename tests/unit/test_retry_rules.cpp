// unit/test_retry_rules.cpp — ReadOnlyRetry, the one rule both fronts
// follow after a Sentinel master's READONLY (client/retry_rules.hpp). The
// Asio front had none (issue 33): it failed at once, a caller's retry loop
// spun against the replica.
#include <gtest/gtest.h>

#include <chrono>

#include "client/retry_rules.hpp"

namespace lockon::detail {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(ReadOnlyRetry, SentinelResendsOnlyWhatDidNotRunWithADoublingPause) {
  ReadOnlyRetry retry(/*sentinel=*/true, Clock::now() + 10s);
  EXPECT_EQ(retry.after_readonly(/*ran=*/false), std::optional<Clock::duration>(1ms));
  EXPECT_EQ(retry.after_readonly(false), std::optional<Clock::duration>(2ms));
  EXPECT_EQ(retry.after_no_master(), std::optional<Clock::duration>(4ms)) << "a resolution after a READONLY waits";
  EXPECT_EQ(retry.after_readonly(/*ran=*/true), std::nullopt) << "part of it ran (a PUBLISH): never resent";
}

TEST(ReadOnlyRetry, NoResendWithoutSentinelOrBeforeAnyReadOnly) {
  ReadOnlyRetry one_server(/*sentinel=*/false, Clock::now() + 10s);
  EXPECT_EQ(one_server.after_readonly(false), std::nullopt) << "a replica named by a redis:// URL: a config error";
  ReadOnlyRetry sentinel(/*sentinel=*/true, Clock::now() + 10s);
  EXPECT_EQ(sentinel.after_no_master(), std::nullopt) << "no master at first use: the resolution's error stands";
}

TEST(ReadOnlyRetry, NoPauseEndsPastTheBoundAndResendsAreCounted) {
  ReadOnlyRetry short_wait(true, Clock::now() + 50ms);
  int resends = 0;
  while (const auto pause = short_wait.after_readonly(false)) {
    EXPECT_LT(*pause, 50ms);
    if (++resends > 100) break;
  }
  // 1, 2, 4, 8, 16, 32 ms (a 64 ms pause would pass the bound); one fewer
  // if this thread was preempted for 18 ms or more on the way.
  EXPECT_GE(resends, 5);
  EXPECT_LE(resends, 6);

  ReadOnlyRetry long_wait(true, Clock::now() + 1h);  // not slept: only the count ends it
  int count = 0;
  while (long_wait.after_readonly(false) && count < 5000) ++count;
  EXPECT_EQ(count, kMaxRoutedWaits - 1);
}

}  // namespace
}  // namespace lockon::detail
