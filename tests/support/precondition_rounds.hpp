// support/precondition_rounds.hpp — timing-bound scenarios that hold under
// load: a test whose precondition a busy machine can miss (a proxy-delayed
// request that must run inside a window, a child process that must start
// within a bound) sets its scenario up again, bounded, instead of failing.
//
//   in_rounds(5, 60s, [&]() -> std::string {
//     ... set the scenario up with fresh names, holders, proxy rules ...
//     if (precondition_missed) return "why (the measured times)";  // set up again
//     EXPECT_...(what the test asserts about the library);
//     return {};  // established: the assertions ran
//   });
//
// A round returns why its precondition was not established (the machine was
// too slow: none of its assertions about the library ran), or "" once it
// was and its assertions ran. The rounds end at the first established one,
// at the first failure recorded (the library misbehaved: no second chance),
// or after `rounds` rounds or `budget` (a round already begun runs to its
// end; each round bounds its own waits). When none established it, the test
// fails and says so: a missed precondition is never counted as a pass.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>

namespace lockon::test {

template <class Round>
void in_rounds(int rounds, std::chrono::milliseconds budget, Round round) {
  const auto stop = std::chrono::steady_clock::now() + budget;
  std::string misses;
  int done = 0;
  while (done < rounds && (done == 0 || std::chrono::steady_clock::now() < stop)) {
    ++done;
    const std::string missed = round();
    if (missed.empty() || ::testing::Test::HasFailure()) return;
    misses += "\n  round " + std::to_string(done) + ": " + missed;
    std::cout << "round " << done << ": precondition not established (" << missed << "); set up again\n";
  }
  ADD_FAILURE() << "the precondition could not be established in " << done << " round(s) (machine too slow?):"
                << misses;
}

}  // namespace lockon::test
