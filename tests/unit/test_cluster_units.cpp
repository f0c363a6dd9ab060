// Cluster pieces that need no server: redirection parsing (routed.hpp) and
// the mapping of cluster error replies (never a raw MOVED/ASK).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

TEST(ClusterRedirect, ParsesMovedAskAndRetryableAnswers) {
  Redirect moved = redirect_of("MOVED 3999 127.0.0.1:6381");
  EXPECT_EQ(moved.kind, RedirectKind::moved);
  EXPECT_EQ(moved.target, (NodeAddress{"127.0.0.1", 6381}));
  Redirect ask = redirect_of("ASK 12182 10.0.0.7:7002");
  EXPECT_EQ(ask.kind, RedirectKind::ask);
  EXPECT_EQ(ask.target, (NodeAddress{"10.0.0.7", 7002}));
  // Redis 7 may leave the host out when the node has no announced endpoint.
  Redirect bare = redirect_of("MOVED 1 :7005");
  EXPECT_EQ(bare.kind, RedirectKind::moved);
  EXPECT_EQ(bare.target, (NodeAddress{"", 7005}));
  EXPECT_EQ(redirect_of("TRYAGAIN Multiple keys request during rehashing of slot").kind, RedirectKind::retry);
  EXPECT_EQ(redirect_of("CLUSTERDOWN The cluster is down").kind, RedirectKind::retry);
  EXPECT_EQ(redirect_of("ERR unknown command").kind, RedirectKind::none);
  EXPECT_EQ(redirect_of("MOVED garbage").kind, RedirectKind::none);
  EXPECT_EQ(redirect_of("MOVED 1 host:99999").kind, RedirectKind::none);
  EXPECT_EQ(redirect_of("CROSSSLOT Keys in request don't hash to the same slot").kind, RedirectKind::none);
}

TEST(ClusterRedirect, LeftoverRedirectionsMapToServerBusyWithoutTheRawCode) {
  for (const char* text : {"MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381", "CLUSTERDOWN The cluster is down",
                           "TRYAGAIN Multiple keys request during rehashing of slot"}) {
    try {
      throw_reply_error(text, "127.0.0.1:7000", "acquire lock");
      FAIL() << text;
    } catch (const ServerBusyError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("acquire lock on 127.0.0.1:7000: ", 0), 0u) << what;
      if (std::string(text).starts_with("MOVED") || std::string(text).starts_with("ASK")) {
        EXPECT_NE(what.find("hash slot kept moving"), std::string::npos) << what;
      }
    }
  }
}

// The back-off of both fronts between retries of a refused request never
// sleeps past the caller's bound: it gives up instead (issue 33: CLUSTERDOWN
// retries ended up to 100 ms after the deadline).
TEST(RetryBackoff, DoublesAndNeverEndsPastTheBound) {
  using Clock = std::chrono::steady_clock;
  const auto bound = Clock::now() + std::chrono::milliseconds(40);
  RetryBackoff backoff(bound);
  std::vector<Clock::duration> pauses;
  for (int i = 0; i < 100; ++i) {
    const auto before = Clock::now();
    const auto pause = backoff.next();
    if (pause == Clock::duration::zero()) break;
    EXPECT_LT(before + pause, bound);
    pauses.push_back(pause);
    std::this_thread::sleep_for(pause);
  }
  ASSERT_GE(pauses.size(), 2u);
  EXPECT_EQ(pauses[0], std::chrono::milliseconds(1));
  EXPECT_EQ(pauses[1], std::chrono::milliseconds(2));
  RetryBackoff late(Clock::now());
  EXPECT_EQ(late.next(), Clock::duration::zero());
}

}  // namespace
}  // namespace lockon::detail
