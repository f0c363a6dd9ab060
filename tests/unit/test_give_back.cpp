// unit/test_give_back.cpp — how long a MultiLock that failed may wait for
// the keys it gives back (multi/give_back.hpp): until its deadline, past it
// one kCancelGrace at most, and without a deadline as unlock() does. The
// behaviour on real servers: ClusterOutageDeadlines.MultiLock… (a Cluster
// answering CLUSTERDOWN held a 2 s wait for 2.4–2.9 s before).
#include <gtest/gtest.h>

#include <chrono>

#include "common/grace.hpp"
#include "multi/give_back.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using lockon::detail::give_back_bound;
using lockon::detail::kCancelGrace;

TEST(GiveBack, BoundIsTheDeadlineOrOneGracePastIt) {
  EXPECT_EQ(give_back_bound(Clock::time_point::max()), Clock::time_point::max()) << "lock(): as unlock()";

  const auto later = Clock::now() + 5s;
  EXPECT_EQ(give_back_bound(later), later) << "before the deadline: the deadline";

  for (const Clock::time_point passed : {Clock::time_point::min(), Clock::now() - 1s, Clock::now()}) {
    const auto before = Clock::now();
    const auto bound = give_back_bound(passed);
    EXPECT_GE(bound, before + kCancelGrace);
    EXPECT_LE(bound, Clock::now() + kCancelGrace);
  }
}

}  // namespace
