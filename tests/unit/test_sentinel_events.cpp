// What a sentinel's failover messages say to a client (both fronts read
// them with client/sentinel_events.hpp). Payloads as Redis 7.0's sentinel.c
// formats them.
#include <gtest/gtest.h>

#include "client/sentinel_events.hpp"
#include "resp_reply.hpp"

namespace lockon::detail {
namespace {

using test_resp::bulk;
using test_resp::message;
using test_resp::parse;

TEST(SentinelEvents, SwitchMasterNamesTheNewMaster) {
  const auto news = read_sentinel_news(*message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 6380"), "mymaster");
  ASSERT_TRUE(news);
  EXPECT_EQ(news->new_master, (NodeAddress{"127.0.0.1", 6380}));
  EXPECT_FALSE(news->candidate);
}

TEST(SentinelEvents, PromotedReplicaIsTheNewMaster) {
  const auto news = read_sentinel_news(
      *message("+promoted-slave", "slave 10.0.0.2:6380 10.0.0.2 6380 @ mymaster 10.0.0.1 6379"), "mymaster");
  ASSERT_TRUE(news);
  EXPECT_EQ(news->new_master, (NodeAddress{"10.0.0.2", 6380}));
  EXPECT_FALSE(news->candidate);
}

TEST(SentinelEvents, ReplicaBeingPromotedIsACandidateOnly) {
  const auto news = read_sentinel_news(
      *message("+failover-state-wait-promotion", "slave 10.0.0.2:6380 10.0.0.2 6380 @ mymaster 10.0.0.1 6379"),
      "mymaster");
  ASSERT_TRUE(news);
  EXPECT_FALSE(news->new_master);
  EXPECT_EQ(news->candidate, (NodeAddress{"10.0.0.2", 6380}));
}

TEST(SentinelEvents, ReconfiguringReplicasIsNewsWithoutAnAddress) {
  const auto news =
      read_sentinel_news(*message("+failover-state-reconf-slaves", "master mymaster 10.0.0.1 6379"), "mymaster");
  ASSERT_TRUE(news);
  EXPECT_FALSE(news->new_master);
  EXPECT_FALSE(news->candidate);
}

TEST(SentinelEvents, OtherMastersAreNotNews) {
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "other 127.0.0.1 6379 127.0.0.1 6380"), "mymaster"));
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "mymaster2 127.0.0.1 6379 127.0.0.1 6380"), "mymaster"));
  EXPECT_FALSE(read_sentinel_news(
      *message("+promoted-slave", "slave 10.0.0.2:6380 10.0.0.2 6380 @ other 10.0.0.1 6379"), "mymaster"));
  EXPECT_FALSE(
      read_sentinel_news(*message("+failover-state-reconf-slaves", "master other 10.0.0.1 6379"), "mymaster"));
}

TEST(SentinelEvents, MalformedOrUnrelatedMessagesAreNotNews) {
  const char* name = "mymaster";
  // A subscription confirmation, another channel, a pattern message.
  EXPECT_FALSE(read_sentinel_news(*parse("*3\r\n" + bulk("subscribe") + bulk("+switch-master") + ":1\r\n"), name));
  EXPECT_FALSE(read_sentinel_news(*message("+sdown", "master mymaster 10.0.0.1 6379"), name));
  EXPECT_FALSE(read_sentinel_news(
      *parse("*4\r\n" + bulk("pmessage") + bulk("*") + bulk("+switch-master") +
             bulk("mymaster 127.0.0.1 6379 127.0.0.1 6380")),
      name));
  // Wrong word counts, ports out of range, non-numeric ports, no '@'.
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1"), name));
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 0"), name));
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 65536"), name));
  EXPECT_FALSE(read_sentinel_news(*message("+switch-master", "mymaster 127.0.0.1 6379 127.0.0.1 63x"), name));
  EXPECT_FALSE(read_sentinel_news(
      *message("+promoted-slave", "slave 10.0.0.2:6380 10.0.0.2 6380 # mymaster 10.0.0.1 6379"), name));
  EXPECT_FALSE(read_sentinel_news(*message("+promoted-slave", "master mymaster 10.0.0.1 6379"), name));
  // Not a string payload.
  EXPECT_FALSE(read_sentinel_news(*parse("*3\r\n" + bulk("message") + bulk("+switch-master") + ":1\r\n"), name));
  EXPECT_FALSE(read_sentinel_news(*parse("+OK\r\n"), name));
}

TEST(SentinelEvents, TheSubscriptionCoversEveryChannelRead) {
  ASSERT_EQ(kSentinelSubscribe.size(), kSentinelEventChannels.size() + 1);
  EXPECT_EQ(kSentinelSubscribe[0], "SUBSCRIBE");
  for (std::size_t i = 0; i < kSentinelEventChannels.size(); ++i)
    EXPECT_EQ(kSentinelSubscribe[i + 1], kSentinelEventChannels[i]);
}

}  // namespace
}  // namespace lockon::detail
