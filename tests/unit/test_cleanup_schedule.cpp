// unit/test_cleanup_schedule.cpp — when the clean-up of an abandoned attempt
// runs (protocol/cleanup_schedule.hpp), the one schedule of both fronts.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "protocol/cleanup_schedule.hpp"

namespace lockon::detail {
namespace {

using namespace std::chrono_literals;

TEST(CleanupSchedule, FailedRunsAreRetriedAtDoublingIntervalsCappedUntilTheGiveUp) {
  const CleanupSchedule::Clock::time_point start{};
  CleanupSchedule schedule(false, start);
  EXPECT_EQ(CleanupSchedule::first_due(start), start + 20ms);
  std::vector<std::chrono::milliseconds> gaps;
  CleanupSchedule::Clock::time_point now = start + 20ms;
  for (int i = 0; i < 6; ++i) {
    const auto next = schedule.after_run(false, now);
    ASSERT_TRUE(next.has_value());
    gaps.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(*next - now));
    now = *next;
  }
  EXPECT_EQ(gaps, (std::vector<std::chrono::milliseconds>{40ms, 80ms, 160ms, 250ms, 250ms, 250ms}));
  // Still retried just before the give-up, not after it.
  EXPECT_TRUE(schedule.after_run(false, start + CleanupSchedule::kGiveUpAfter - 1ms).has_value());
  EXPECT_FALSE(schedule.after_run(false, start + CleanupSchedule::kGiveUpAfter).has_value());
  EXPECT_FALSE(schedule.cleaned_once());
}

TEST(CleanupSchedule, AKnownOutcomeEndsWithItsFirstSuccess) {
  CleanupSchedule schedule(false, CleanupSchedule::Clock::time_point{});
  EXPECT_FALSE(schedule.after_run(true, CleanupSchedule::Clock::time_point{} + 20ms).has_value());
}

TEST(CleanupSchedule, AnUnknownOutcomeIsSweptAtTheStatedOffsetsFromTheFirstSuccess) {
  const CleanupSchedule::Clock::time_point start{};
  CleanupSchedule schedule(true, start);
  const CleanupSchedule::Clock::time_point first_success = start + 100ms;
  auto next = schedule.after_run(true, first_success);
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(schedule.cleaned_once());
  EXPECT_EQ(*next, first_success + 50ms);
  // A sweep that fails is retried, then the offsets go on from its success.
  next = schedule.after_run(false, *next);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, first_success + 50ms + 40ms);
  next = schedule.after_run(true, *next);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, first_success + 90ms + 950ms);
  next = schedule.after_run(true, *next);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, first_success + 1040ms + 4000ms);
  EXPECT_FALSE(schedule.after_run(true, *next).has_value());
}

}  // namespace
}  // namespace lockon::detail
