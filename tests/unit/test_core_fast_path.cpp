// unit/test_core_fast_path.cpp — the exclusive lock's fast path as both
// fronts run it (core/fast_path.hpp), over a scripted port on the blocking
// port's coroutine (InlineTask): what is written, what each reply means, and
// what becomes of K and of the holder record after every failure — every
// branch without a server.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/fast_path.hpp"
#include "lockon/errors.hpp"
#include "scripted_lock_port.hpp"

namespace lockon::detail::core::fast_path_test {

using test_resp::bulk;
using namespace scripted;

const std::string kNil = "$-1\r\n";
const std::string kOk = "+OK\r\n";

FastRequest plain_request(bool record = true) {
  FastRequest request;
  request.name = "K";
  request.fence_key = "{K}:fence";
  request.who_key = "{K}:who";
  request.token = "tok";
  request.record = record ? "rec" : "";
  request.ttl_text = "30000";
  return request;
}

FastRequest fenced_request() {
  FastRequest request = plain_request();
  request.fencing = true;
  return request;
}

Attempt run(ScriptedLockPort& port, const FastRequest& request) {
  return fast_attempt(port, request, Clock::now() + std::chrono::seconds(5)).get();
}

TEST(CoreFastPath, FreeKeyIsTakenWithTheRecordInTheSameWrite) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil, kOk}));
  const Attempt attempt = run(port, plain_request());
  EXPECT_TRUE(attempt.acquired);
  EXPECT_TRUE(attempt.granted);
  ASSERT_EQ(port.writes.size(), 1u);
  EXPECT_EQ(port.writes[0], (std::vector<std::string>{"SET K tok NX PX 30000 GET", "SET {K}:who rec NX PX 30000"}));
  EXPECT_EQ(port.records_replaced, 0);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, WithoutRecordOrExpiryOneCommand) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil}));
  FastRequest request = plain_request(false);
  request.no_expiry = true;
  EXPECT_TRUE(run(port, request).acquired);
  EXPECT_EQ(port.writes[0], (std::vector<std::string>{"SET K tok NX GET"}));
}

TEST(CoreFastPath, HeldKeyIsBusyAndLeavesNothingToCleanUp) {
  ScriptedLockPort port;
  port.steps.push_back(answer({bulk("other"), kNil}));
  const Attempt attempt = run(port, plain_request());
  EXPECT_FALSE(attempt.acquired);
  EXPECT_FALSE(attempt.granted);
  EXPECT_TRUE(port.abandoned.empty());
  EXPECT_EQ(port.records_dropped, 0);  // NX: the holder's record was not touched
}

// K held by someone else whose record is absent: our record's SET NX wrote
// the who key, and must not stay there naming us.
TEST(CoreFastPath, HeldKeyWithoutRecordDropsTheRecordWeWrote) {
  ScriptedLockPort port;
  port.steps.push_back(answer({bulk("other"), kOk}));
  EXPECT_FALSE(run(port, plain_request()).acquired);
  EXPECT_EQ(port.records_dropped, 1);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, CustomTokenInUseDropsTheRecordWeWrote) {
  ScriptedLockPort port;
  port.steps.push_back(answer({bulk("tok"), kOk}));
  FastRequest request = plain_request();
  request.random_token = false;
  EXPECT_THROW(run(port, request), LockError);
  EXPECT_EQ(port.records_dropped, 1);
}

TEST(CoreFastPath, FencedCustomTokenInUseIsMisuse) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"*3\r\n:0\r\n" + bulk("tok") + ":9\r\n", kNil}));
  FastRequest request = fenced_request();
  request.random_token = false;
  EXPECT_THROW(run(port, request), LockError);
  EXPECT_EQ(port.records_dropped, 0);  // the who key was not ours
}

TEST(CoreFastPath, NothingSentLeavesNothingToDrop) {
  ScriptedLockPort port;
  Step refused;
  refused.fails = [] { throw ConnectError("connection refused"); };
  port.steps.push_back(refused);
  EXPECT_THROW(run(port, plain_request()), ConnectError);
  EXPECT_EQ(port.records_dropped, 0);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, BusyAfterALostReplyDropsTheRecordTheLostWriteMayHaveWritten) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  port.steps.push_back(answer({bulk("other"), kNil}));
  EXPECT_FALSE(run(port, plain_request()).acquired);
  EXPECT_EQ(port.records_dropped, 1);
}

TEST(CoreFastPath, NoExpiryRecordHasNoLease) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil, kOk}));
  FastRequest request = plain_request();
  request.no_expiry = true;
  EXPECT_TRUE(run(port, request).acquired);
  EXPECT_EQ(port.writes[0], (std::vector<std::string>{"SET K tok NX GET", "SET {K}:who rec NX"}));
}

TEST(CoreFastPath, AnEarlierHoldersRecordIsReplacedOnlyWhenWon) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil, kNil}));
  EXPECT_TRUE(run(port, plain_request()).acquired);
  EXPECT_EQ(port.records_replaced, 1);
}

TEST(CoreFastPath, AnErrorReplyToTheRecordFailsTheAcquisitionAndHandsKOn) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil, "-NOPERM this user has no permissions to access the key\r\n"}));
  EXPECT_THROW(run(port, plain_request()), PermissionError);
  EXPECT_EQ(port.abandoned, std::vector<bool>{false});  // K was won: the clean-up releases it
  EXPECT_EQ(port.records_replaced, 0);
}

TEST(CoreFastPath, ARecordRefusedByAMigratingSlotIsGoneWithout) {
  ScriptedLockPort port;
  port.cluster = true;
  port.steps.push_back(answer({kNil, "-ASK 3999 127.0.0.1:7001\r\n"}));
  EXPECT_TRUE(run(port, plain_request()).acquired);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, LostReplyIsResentOnceAndOurTokenProvesTheFirstWon) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  port.steps.push_back(answer({bulk("tok"), kOk}));
  const Attempt attempt = run(port, plain_request());
  EXPECT_TRUE(attempt.acquired);
  EXPECT_EQ(port.writes.size(), 2u);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, SecondLostReplyHandsTheUnknownOutcomeToTheCleanUp) {
  ScriptedLockPort port;
  for (int i = 0; i < 2; ++i)
    port.steps.push_back(lost_connection());
  EXPECT_THROW(run(port, plain_request()), ClosedError);
  EXPECT_EQ(port.abandoned, std::vector<bool>{true});
  EXPECT_EQ(port.records_dropped, 0);
}

TEST(CoreFastPath, CustomTokenIsNotResentAfterALostReply) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  FastRequest request = plain_request();
  request.random_token = false;
  EXPECT_THROW(run(port, request), ClosedError);
  EXPECT_EQ(port.writes.size(), 1u);
  EXPECT_EQ(port.abandoned, std::vector<bool>{true});
}

TEST(CoreFastPath, CustomTokenHeldBySomeoneElseIsMisuse) {
  ScriptedLockPort port;
  port.steps.push_back(answer({bulk("tok"), kNil}));
  FastRequest request = plain_request();
  request.random_token = false;
  EXPECT_THROW(run(port, request), LockError);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, ErrorReplyToTheSetIsTypedAndDropsOurRecord) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", kOk}));
  EXPECT_THROW(run(port, plain_request()), WrongTypeError);
  EXPECT_EQ(port.records_dropped, 1);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, DeadlineHandsTheRequestToTheCleanUpAsUnknown) {
  ScriptedLockPort port;
  port.steps.push_back(no_answer(Sent::Ended::deadline));
  const Attempt attempt = run(port, plain_request());
  EXPECT_FALSE(attempt.acquired);
  EXPECT_TRUE(attempt.deadline_passed);
  EXPECT_EQ(port.abandoned, std::vector<bool>{true});
}

TEST(CoreFastPath, CancellationLeavesTheCleanUpToTheCaller) {
  ScriptedLockPort port;
  port.steps.push_back(no_answer(Sent::Ended::cancelled));
  const Attempt attempt = run(port, plain_request());
  EXPECT_TRUE(attempt.cancelled);
  EXPECT_FALSE(attempt.deadline_passed);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, SetRefusedByAMigratingSlotDropsTheRecord) {
  ScriptedLockPort port;
  port.cluster = true;
  port.steps.push_back(answer({"-ASK 3999 127.0.0.1:7001\r\n", kOk}));
  const Attempt attempt = run(port, plain_request());
  EXPECT_FALSE(attempt.acquired);
  EXPECT_EQ(port.records_dropped, 1);
  EXPECT_TRUE(port.abandoned.empty());
}

TEST(CoreFastPath, SetRefusedAfterALostReplyIsUnknown) {
  ScriptedLockPort port;
  port.cluster = true;
  port.steps.push_back(lost_connection());
  port.steps.push_back(answer({"-ASK 3999 127.0.0.1:7001\r\n", kOk}));
  EXPECT_FALSE(run(port, plain_request()).acquired);
  EXPECT_EQ(port.abandoned, std::vector<bool>{true});
  EXPECT_EQ(port.records_dropped, 0);
}

TEST(CoreFastPath, FencedScriptIsSentByShaThenByBodyOnNoscript) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"-NOSCRIPT No matching script\r\n", kOk}));
  port.steps.push_back(answer({"*2\r\n:1\r\n:42\r\n", kNil}));
  const Attempt attempt = run(port, fenced_request());
  EXPECT_TRUE(attempt.acquired);
  EXPECT_EQ(attempt.fence, 42u);
  ASSERT_EQ(port.writes.size(), 2u);
  EXPECT_EQ(port.writes[0][0].rfind("EVALSHA ", 0), 0u);
  EXPECT_EQ(port.writes[1][0].rfind("EVAL ", 0), 0u);
  EXPECT_EQ(port.records_replaced, 1);  // the record reply was nil
}

TEST(CoreFastPath, FencedWinAfterALostReplyKeepsTheFenceKGot) {
  ScriptedLockPort port;
  port.steps.push_back(lost_connection());
  port.steps.push_back(answer({"*3\r\n:0\r\n" + bulk("tok") + ":7\r\n", kOk}));
  const Attempt attempt = run(port, fenced_request());
  EXPECT_TRUE(attempt.acquired);
  EXPECT_EQ(attempt.fence, 7u);
}

TEST(CoreFastPath, FencedBusyIsNotAcquired) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"*2\r\n:0\r\n" + bulk("other"), kNil}));
  EXPECT_FALSE(run(port, fenced_request()).acquired);
  EXPECT_EQ(port.records_replaced, 0);
}

TEST(CoreFastPath, MalformedFencedReplyIsAProtocolErrorOfUnknownOutcome) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"*2\r\n:1\r\n" + bulk("not a fence"), kOk}));
  EXPECT_THROW(run(port, fenced_request()), ProtocolError);
  EXPECT_EQ(port.abandoned, std::vector<bool>{true});
}

TEST(CoreFastPath, RefusedWaitAfterAWonSetHandsKOn) {
  ScriptedLockPort port;
  port.steps.push_back(answer({kNil, kOk, "-NOREPLICAS Not enough good replicas\r\n"}));
  FastRequest request = plain_request();
  const std::array<std::string_view, 3> wait{"WAIT", "1", "100"};
  request.wait = wait;
  EXPECT_THROW(run(port, request), ReplyError);
  EXPECT_EQ(port.abandoned, std::vector<bool>{false});  // known outcome: K is ours, handed on
  EXPECT_EQ(port.records_dropped, 0);
  EXPECT_EQ(port.writes[0].back(), "WAIT 1 100");
}

TEST(CoreFastPath, WaitAcknowledgementsAreReported) {
  ScriptedLockPort port;
  port.steps.push_back(answer({"*2\r\n:1\r\n:5\r\n", kOk, ":2\r\n"}));
  FastRequest request = fenced_request();
  const std::array<std::string_view, 3> wait{"WAIT", "2", "100"};
  request.wait = wait;
  const Attempt attempt = run(port, request);
  EXPECT_TRUE(attempt.acquired);
  EXPECT_EQ(attempt.acks, 2);
  // With WAIT in the write the body goes first: a NOSCRIPT would make WAIT
  // wait for the record alone.
  EXPECT_EQ(port.writes[0][0].rfind("EVAL ", 0), 0u);
}

}  // namespace lockon::detail::core::fast_path_test
