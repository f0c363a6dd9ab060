// The slot map parsing shared by the blocking and async fronts
// (client/cluster_map.hpp), on replies shaped as Redis 7.0 sends them.
#include <gtest/gtest.h>

#include <string>

#include "client/cluster_map.hpp"
#include "resp_reply.hpp"

namespace lockon::detail {
namespace {

using test_resp::bulk;
using test_resp::parse;

// One CLUSTER SHARDS node entry as a RESP2 flat map.
std::string node(const std::string& endpoint, int port, const std::string& role, const std::string& health) {
  return "*10\r\n" + bulk("id") + bulk("abc") + bulk("port") + ":" + std::to_string(port) + "\r\n" + bulk("endpoint") +
         bulk(endpoint) + bulk("role") + bulk(role) + bulk("health") + bulk(health);
}

TEST(ClusterMap, ShardsGiveOnlineMastersAndTheirRanges) {
  // Shard 1: slots 0-99 and 200-299, master online at 10.0.0.1:7000, a replica.
  // Shard 2: slots 100-199, master announced "?" (use the asked host), failed
  // master first (skipped), then the online one.
  const std::string shard1 = "*4\r\n" + bulk("slots") + "*4\r\n:0\r\n:99\r\n:200\r\n:299\r\n" + bulk("nodes") + "*2\r\n" +
                             node("10.0.0.1", 7000, "master", "online") + node("10.0.0.4", 7003, "replica", "online");
  const std::string shard2 = "*4\r\n" + bulk("slots") + "*2\r\n:100\r\n:199\r\n" + bulk("nodes") + "*2\r\n" +
                             node("10.0.0.9", 7009, "master", "failed") + node("?", 7001, "master", "online");
  const ReplyPtr reply = parse("*2\r\n" + shard1 + shard2);
  const auto owners = parse_cluster_shards(*reply, NodeAddress{"127.0.0.5", 6000}, false);
  ASSERT_EQ(owners.size(), 3u);
  EXPECT_EQ(owners[0].start, 0);
  EXPECT_EQ(owners[0].end, 99);
  EXPECT_EQ(owners[0].master, (NodeAddress{"10.0.0.1", 7000}));
  EXPECT_EQ(owners[1].start, 200);
  EXPECT_EQ(owners[1].end, 299);
  EXPECT_EQ(owners[2].start, 100);
  EXPECT_EQ(owners[2].master, (NodeAddress{"127.0.0.5", 7001}));
}

TEST(ClusterMap, SlotsGiveTheFirstNodeOfEachRange) {
  const ReplyPtr reply = parse("*1\r\n*4\r\n:0\r\n:16383\r\n*3\r\n" + bulk("") + ":7000\r\n" + bulk("id1") + "*3\r\n" +
                               bulk("10.0.0.2") + ":7001\r\n" + bulk("id2"));
  const auto owners = parse_cluster_slots(*reply, NodeAddress{"127.0.0.5", 6000});
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0].end, 16383);
  EXPECT_EQ(owners[0].master, (NodeAddress{"127.0.0.5", 7000})) << "an empty host is the asked node's";
}

TEST(ClusterMap, NonArraysGiveNothing) {
  const ReplyPtr reply = parse("-ERR unknown subcommand\r\n");
  EXPECT_TRUE(parse_cluster_shards(*reply, NodeAddress{"h", 1}, false).empty());
  EXPECT_TRUE(parse_cluster_slots(*reply, NodeAddress{"h", 1}).empty());
}

// A map read asks the known masters, then the seeds not among them; nodes
// that failed lately go last (a frozen master first in line held every read
// for its whole budget: issue 33).
TEST(ClusterMap, CandidatesPutSuspectsLastKeepingTheOrder) {
  const std::vector<NodeAddress> known{{"127.0.0.1", 7000}, {"127.0.0.1", 7001}, {"127.0.0.1", 7002}};
  const std::vector<NodeAddress> seeds{{"127.0.0.1", 7001}, {"127.0.0.1", 7005}};
  const auto plain = map_candidates(known, seeds, {});
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_EQ(plain[0].port, 7000);
  EXPECT_EQ(plain[3].port, 7005);
  const auto ordered = map_candidates(known, seeds, {"127.0.0.1:7000", "127.0.0.1:7001"});
  ASSERT_EQ(ordered.size(), 4u);
  EXPECT_EQ(ordered[0].port, 7002);
  EXPECT_EQ(ordered[1].port, 7005);
  EXPECT_EQ(ordered[2].port, 7000);
  EXPECT_EQ(ordered[3].port, 7001);
}

TEST(ClusterMap, MapReadBudgetIsBoundedWithoutASocketTimeout) {
  ConnectionOptions options;
  options.connect_timeout = std::chrono::milliseconds(300);
  options.socket_timeout = std::chrono::milliseconds(0);  // none
  EXPECT_EQ(map_read_budget(options), std::chrono::milliseconds(5300));
  options.socket_timeout = std::chrono::milliseconds(700);
  EXPECT_EQ(map_read_budget(options), std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace lockon::detail
