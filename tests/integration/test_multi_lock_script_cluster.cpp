// integration/test_multi_lock_script_cluster.cpp — MultiLock's single-script
// path on a Redis Cluster: keys sharing a hash tag (one slot) are taken by
// one script on the slot's master; keys in different slots take the
// ordered path (no script at all without fencing: each key's SET NX).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster_test_fixture.hpp"
#include "lockon/lockon.hpp"

namespace lockon::test {
namespace {

class MultiLockScriptCluster : public ClusterTest {
 protected:
  // EVALSHA + EVAL calls over every master.
  static long long scripts_on_masters() {
    long long total = 0;
    for (RedisServer* master : cluster().masters()) {
      RawConnection raw = master->connect();
      total += scripts_run(raw);
    }
    return total;
  }
};

TEST_F(MultiLockScriptCluster, SameHashTagTakesOneScriptDifferentSlotsTheOrderedPath) {
  const Client client(cluster().url());
  const std::string tag = "{" + unique_key("acct") + "}";
  const std::vector<std::string> tagged{tag + ":c", tag + ":a", tag + ":b"};
  MultiLock same_slot(client, tagged, {.fencing = true});
  ASSERT_TRUE(same_slot.try_lock());  // loads the script (NOSCRIPT + EVAL the first time)
  same_slot.release();
  long long before = scripts_on_masters();
  ASSERT_TRUE(same_slot.try_lock());
  EXPECT_EQ(scripts_on_masters() - before, 1) << "3 keys in one slot: one script";
  RawConnection owner = cluster().owner_of_slot(detail::key_slot(tagged[0])).connect();
  const std::string token = owner.command({"GET", tagged[0]}).str;
  for (std::size_t i = 0; i < tagged.size(); ++i) {
    EXPECT_EQ(owner.command({"GET", tagged[i]}).str, token);
    EXPECT_NE(same_slot.fence(i), 0u);
  }
  Lock plain(client, tagged[2]);
  EXPECT_FALSE(plain.try_lock());
  same_slot.release();
  ASSERT_TRUE(plain.try_lock());
  // Busy: nothing taken, the single attempt fails.
  before = scripts_on_masters();
  EXPECT_FALSE(same_slot.try_lock());
  EXPECT_EQ(scripts_on_masters() - before, 1);
  EXPECT_EQ(owner.command({"EXISTS", tagged[0]}).integer, 0) << "the script took a key while another was busy";
  plain.release();

  // Names whose slots are served by different masters.
  const auto masters = cluster().masters();
  ASSERT_GE(masters.size(), 2u);
  const std::vector<std::string> spread{name_on(*masters[0], "x"), name_on(*masters[1], "y")};
  ASSERT_NE(detail::key_slot(spread[0]), detail::key_slot(spread[1]));
  MultiLock across(client, spread);
  before = scripts_on_masters();
  ASSERT_TRUE(across.try_lock());
  EXPECT_EQ(scripts_on_masters() - before, 0) << "keys in different slots must take the ordered path";
  EXPECT_TRUE(across.owned());
  across.release();
  before = scripts_on_masters();
  // Two slots on the same master: still not one script (a Cluster's unit is the slot).
  const std::vector<std::string> same_master{name_on(*masters[0], "p"), name_on(*masters[0], "q")};
  if (detail::key_slot(same_master[0]) != detail::key_slot(same_master[1])) {
    MultiLock two_slots(client, same_master);
    ASSERT_TRUE(two_slots.try_lock());
    EXPECT_EQ(scripts_on_masters() - before, 0);
    two_slots.release();
  }
}

}  // namespace
}  // namespace lockon::test
