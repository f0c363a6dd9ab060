// unit/test_core_wait_attempt.cpp — a queued waiter's attempt as both fronts
// run it (core/wait_attempt.hpp), over the scripted lock port: the one
// resend after a lost reply, and what each reply means.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/wait_attempt.hpp"
#include "lockon/errors.hpp"
#include "scripted_lock_port.hpp"

namespace lockon::detail::core::wait_attempt_test {

using namespace scripted;

const std::string kEntry = "sid|waiter|30000|x|tok";

WaitRequest request(bool random_token = true) { return WaitRequest{"K", kEntry, "rec", random_token}; }

Attempt run(ScriptedLockPort& port, const WaitRequest& request, bool enqueue = true) {
  return wait_attempt(port, request, enqueue, Clock::now() + std::chrono::seconds(5)).get();
}

// {acquired, fence or pttl, publish denied, ahead}
std::string reply(int acquired, long long second, int denied, long long ahead) {
  return "*4\r\n:" + std::to_string(acquired) + "\r\n:" + std::to_string(second) + "\r\n:" + std::to_string(denied) +
         "\r\n:" + std::to_string(ahead) + "\r\n";
}

TEST(CoreWaitAttempt, QueuedBehindAHolderReportsItsLeaseAndThoseAhead) {
  ScriptedLockPort port;
  port.steps.push_back(answer({reply(0, 2500, 0, 3)}));
  const Attempt attempt = run(port, request());
  EXPECT_FALSE(attempt.acquired);
  EXPECT_EQ(attempt.pttl, 2500);
  EXPECT_EQ(attempt.ahead, 3);
  ASSERT_EQ(port.writes.size(), 1u);
  EXPECT_EQ(port.writes[0][0].rfind(kEntry + " 1 ", 0), 0u) << port.writes[0][0];  // enqueue
}

TEST(CoreWaitAttempt, GrantCarriesTheFence) {
  ScriptedLockPort port;
  port.steps.push_back(answer({reply(1, 77, 0, 0)}));
  const Attempt attempt = run(port, request(), false);
  EXPECT_TRUE(attempt.acquired);
  EXPECT_EQ(attempt.fence, 77u);
  EXPECT_EQ(port.writes[0][0].rfind(kEntry + " 0 ", 0), 0u) << port.writes[0][0];
}

TEST(CoreWaitAttempt, LostReplyIsResentOnceWithoutQueueingBlindly) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  port.steps.push_back(answer({reply(1, 5, 0, 0)}));
  EXPECT_TRUE(run(port, request()).acquired);
  ASSERT_EQ(port.writes.size(), 2u);
  EXPECT_EQ(port.writes[0][0].rfind(kEntry + " 1 ", 0), 0u);
  EXPECT_EQ(port.writes[1][0].rfind(kEntry + " 0 ", 0), 0u);  // finds our entry (LPOS), never a second one
}

TEST(CoreWaitAttempt, SecondLostReplyFails) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  port.steps.push_back(lost_connection());
  EXPECT_THROW(run(port, request()), ClosedError);
  EXPECT_EQ(port.writes.size(), 2u);
}

TEST(CoreWaitAttempt, CustomTokenIsNeverResent) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  EXPECT_THROW(run(port, request(false)), ClosedError);
  EXPECT_EQ(port.writes.size(), 1u);
}

TEST(CoreWaitAttempt, DeadlineAndCancellationAreTold) {
  ScriptedLockPort port;
  port.steps.push_back(no_answer(Sent::Ended::deadline));
  port.steps.push_back(no_answer(Sent::Ended::cancelled));
  const Attempt late = run(port, request());
  EXPECT_TRUE(late.deadline_passed);
  EXPECT_FALSE(late.cancelled);
  const Attempt cancelled = run(port, request());
  EXPECT_TRUE(cancelled.cancelled);
  EXPECT_FALSE(cancelled.deadline_passed);
}

TEST(CoreWaitAttempt, TokenInUseAndDeniedPublishAreReported) {
  ScriptedLockPort port;
  port.steps.push_back(answer({reply(0, 100, 1, 0)}));
  port.steps.push_back(answer({reply(-1, 0, 0, 0)}));
  EXPECT_FALSE(run(port, request()).acquired);
  EXPECT_EQ(port.publish_warnings, 1);
  EXPECT_THROW(run(port, request(false)), LockError);
}

TEST(CoreWaitAttempt, MalformedOrErrorRepliesAreTyped) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"*2\r\n:1\r\n:2\r\n"}));
  port.steps.push_back(answer({"-NOPERM this user has no permissions to run the 'evalsha' command\r\n"}));
  EXPECT_THROW(run(port, request()), ProtocolError);
  EXPECT_THROW(run(port, request()), PermissionError);
}

}  // namespace lockon::detail::core::wait_attempt_test
