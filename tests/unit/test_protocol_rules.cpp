// unit/test_protocol_rules.cpp — the protocol rules both fronts share
// (src/protocol/): the queue-entry format the Lua scripts split (frozen:
// old and new, blocking and async processes queue in one list), and when a
// hand-over message proves a grant.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "protocol/queue_entry.hpp"
#include "protocol/wait_attempt.hpp"
#include "protocol/wake_proof.hpp"
#include "resp_reply.hpp"

namespace lockon::detail {
namespace {

using test_resp::parse;

TEST(QueueEntry, FieldsInTheOrderTheScriptsSplitThem) {
  EXPECT_EQ(queue_entry("sid", "7", "30000", exclusive_kind(true), "tok"), "sid|7|30000|1|tok");
  EXPECT_EQ(queue_entry(kNotQueued, kNotQueued, "500", exclusive_kind(false), "tok"), "-|-|500|0|tok");
  EXPECT_EQ(queue_entry("sid", kNotQueued, "500", "r", "tok"), "sid|-|500|r|tok");  // a shared holder's kind
}

TEST(QueueEntry, ATokenHoldingTheSeparatorSurvivesEveryRewrite) {
  const std::string entry = queue_entry("old", "3", "1000", "1", "a|b|c");
  EXPECT_EQ(entry_token(entry), "a|b|c");
  const std::string moved = entry_for_subscriber(entry, "new");
  EXPECT_EQ(moved, "new|3|1000|1|a|b|c");
  EXPECT_EQ(entry_token(moved), "a|b|c");
  EXPECT_EQ(entry_token("sid|3|1000"), "") << "too few fields: no token";
}

TEST(WakeProof, OnlyAMessageOverTheConnectionHeardBeforeTheAttemptFromTheServingNode) {
  int asked = 0;
  const auto serving = [&] {
    ++asked;
    return true;
  };
  const auto not_serving = [] { return false; };
  EXPECT_FALSE(wake_proves_grant(0, 0, false, serving)) << "nothing delivered";
  EXPECT_FALSE(wake_proves_grant(5, 4, false, serving)) << "a connection made after the attempt (a demotion's)";
  EXPECT_EQ(asked, 0) << "the node is asked last, only when the generations match";
  EXPECT_TRUE(wake_proves_grant(5, 5, false, serving));
  EXPECT_FALSE(wake_proves_grant(5, 5, false, not_serving)) << "the subscriber's node no longer serves the name";
  EXPECT_TRUE(wake_proves_grant(5, 5, true, not_serving)) << "sharded: a slot that leaves unsubscribes the channel";
}

TEST(WaitAttempt, ArgumentsInArgvOrderTheRecordOnlyWhenThereIsOne) {
  const WaitAttemptArgs plain("e", true, false, "");
  EXPECT_EQ(std::vector<std::string_view>(plain.view().begin(), plain.view().end()),
            (std::vector<std::string_view>{"e", "1", kQueueTtlMs, "0"}));
  const WaitAttemptArgs recorded("e", false, true, "rec");
  EXPECT_EQ(std::vector<std::string_view>(recorded.view().begin(), recorded.view().end()),
            (std::vector<std::string_view>{"e", "0", kQueueTtlMs, "1", "rec"}));
}

TEST(WaitAttempt, EachReplyShapeReadAndAnythingElseRefused) {
  const auto acquired = read_wait_attempt(*parse("*4\r\n:1\r\n:1700000000000001\r\n:0\r\n:0\r\n"));
  ASSERT_TRUE(acquired);
  EXPECT_TRUE(acquired->acquired);
  EXPECT_EQ(acquired->fence, 1700000000000001u);
  const auto queued = read_wait_attempt(*parse("*4\r\n:0\r\n:2500\r\n:1\r\n:3\r\n"));
  ASSERT_TRUE(queued);
  EXPECT_FALSE(queued->acquired);
  EXPECT_EQ(queued->pttl, 2500);
  EXPECT_EQ(queued->ahead, 3);
  EXPECT_TRUE(queued->publish_denied);
  const auto in_use = read_wait_attempt(*parse("*4\r\n:-1\r\n:0\r\n:0\r\n:0\r\n"));
  ASSERT_TRUE(in_use);
  EXPECT_TRUE(in_use->token_in_use);
  EXPECT_FALSE(in_use->acquired);
  EXPECT_FALSE(read_wait_attempt(*parse("*3\r\n:1\r\n:1\r\n:0\r\n"))) << "three elements";
  EXPECT_FALSE(read_wait_attempt(*parse("*4\r\n:1\r\n$1\r\n1\r\n:0\r\n:0\r\n"))) << "a string where an integer goes";
  EXPECT_FALSE(read_wait_attempt(*parse("$2\r\nOK\r\n")));
}

}  // namespace
}  // namespace lockon::detail
