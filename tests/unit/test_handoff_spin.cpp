// unit/test_handoff_spin.cpp — where a waiter polls instead of sleeping
// (src/lock/handoff_spin.hpp).
#include <gtest/gtest.h>

#include <chrono>

#include "lock/handoff_spin.hpp"

namespace lockon::detail {
namespace {

using namespace std::chrono_literals;
using Clock = SpinWindow::Clock;

TEST(HandoffSpin, WindowEndsOneIntervalAfterTheExpectedHandOverAndLastsAtMostTheBound) {
  const auto sent = Clock::now();
  // Two ahead, 200 µs per turn: expected at +600 µs, window ends at +800.
  SpinWindow w = spin_window(sent, 2, 200us, 1000us);
  EXPECT_EQ(w.to, sent + 800us);
  EXPECT_EQ(w.from, sent);  // the whole wait fits the bound
  // Fifteen ahead: only the last millisecond before the window's end.
  w = spin_window(sent, 15, 200us, 1000us);
  EXPECT_EQ(w.to, sent + 3400us);
  EXPECT_EQ(w.from, sent + 2400us);
  EXPECT_FALSE(w.empty());
}

TEST(HandoffSpin, NoWindowWithoutAnEstimateOrForSlowKeysOrWhenDisabled) {
  const auto sent = Clock::now();
  EXPECT_TRUE(spin_window(sent, -1, 200us, 1000us).empty());  // ahead unknown
  EXPECT_TRUE(spin_window(sent, 0, 0ns, 1000us).empty());     // pace not measured yet
  EXPECT_TRUE(spin_window(sent, 0, 1001us, 1000us).empty());  // slower than the bound
  EXPECT_TRUE(spin_window(sent, 0, 200us, 0us).empty());      // handoff_spin = 0
  EXPECT_TRUE(spin_window(sent, 2'000'000, 200us, 1000us).empty());
}

TEST(HandoffSpin, IntervalIsAMovingAverageOfPerTurnSamples) {
  EXPECT_EQ(next_handoff_interval(0ns, 900us, 2), 300us);  // first sample: waited / (ahead + 1)
  EXPECT_EQ(next_handoff_interval(300us, 700us, 0), 400us);  // (3 × 300 + 700) / 4
  // A single stall moves it by a quarter of the sample, not to it.
  EXPECT_EQ(next_handoff_interval(300us, 600'000us, 0), 150'225us);
  // Nothing to learn from an unknown place or a non-positive wait.
  EXPECT_EQ(next_handoff_interval(300us, 700us, -1), 300us);
  EXPECT_EQ(next_handoff_interval(300us, 0ns, 0), 300us);
}

}  // namespace
}  // namespace lockon::detail
