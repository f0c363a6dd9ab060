// integration/test_cluster_lock_redirects.cpp — acquiring a lock while its
// slot is being migrated. The acquisition's write (SET K NX, the holder
// record SET K:who NX, maybe WAIT) is one pipeline; during a migration the
// source runs the commands whose keys it still has and answers ASK for the
// others. With K held on the source by a holder that wrote no record, the
// SET ran there (and lost) while the record got ASK: the whole pipeline was
// resent to the target with ASKING, where K does not exist, so the SET won
// there too and two processes held K (found by review, session 18).
#include <chrono>
#include <string>

#include "client/slots.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/raw_connection.hpp"

#include "cluster_lock_redirects_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// K held on the source (no holder record): our SET K NX runs there and
// loses, our record's SET gets ASK. Nothing may be sent again, K is busy.
TEST_F(ClusterLockRedirects, TryLockOnAKeyHeldOnTheMigratingSourceFails) {
  const Client client(cluster().url());
  Lock holder(client, name_, {.ttl = 30s, .holder_record = false});
  ASSERT_TRUE(holder.try_lock());
  begin_migration();  // K stays on the source, K:who exists nowhere
  Lock other(client, name_, {.ttl = 30s});
  const bool acquired = other.try_lock();
  const bool created_on_target = on_target(name_);
  EXPECT_FALSE(acquired) << "two holders: K is held on the source";
  EXPECT_FALSE(created_on_target) << "K was created on the ASK target next to the source's copy";
  EXPECT_TRUE(holder.held());
}

// The same with fencing (the SET is a script over K and its fence key,
// both on the source: it runs there and loses).
TEST_F(ClusterLockRedirects, FencedTryLockOnAKeyHeldOnTheMigratingSourceFails) {
  const Client client(cluster().url());
  Lock holder(client, name_, {.ttl = 30s, .fencing = true, .holder_record = false});
  ASSERT_TRUE(holder.try_lock());
  begin_migration();
  Lock other(client, name_, {.ttl = 30s, .fencing = true});
  EXPECT_FALSE(other.try_lock()) << "two holders: K is held on the source";
  EXPECT_FALSE(on_target(name_)) << "K was created on the ASK target next to the source's copy";
}

// K moved to the target, its holder record still on the source: our SET
// gets ASK, our record's SET NX runs on the source (and writes nothing).
// Not resent: not acquired, nothing of ours left anywhere.
TEST_F(ClusterLockRedirects, TryLockWhoseSetIsRefusedWhileTheRecordRanFails) {
  const Client client(cluster().url());
  Lock holder(client, name_, {.ttl = 30s});
  ASSERT_TRUE(holder.try_lock());
  begin_migration();
  const RawReply moved =
      source_->command({"MIGRATE", target_->host(), std::to_string(target_->port()), name_, "0", "5000"});
  ASSERT_TRUE(moved.is("OK")) << moved.to_string();
  const std::string held_by = [&] {
    RawConnection target = target_->connect();
    target.command({"ASKING"});
    return target.command({"GET", name_}).str;
  }();
  Lock other(client, name_, {.ttl = 30s});
  EXPECT_FALSE(other.try_lock());
  RawConnection target = target_->connect();
  target.command({"ASKING"});
  EXPECT_EQ(target.command({"GET", name_}).str, held_by) << "the holder's token was replaced";
}

// K not on the source at all (free, slot half-moved): every keyed command
// gets ASK and the acquisition goes whole to the target, once.
TEST_F(ClusterLockRedirects, TryLockOnAFreeKeyOfAMigratingSlotTakesItOnTheTarget) {
  const Client client(cluster().url());
  client.command({"GET", name_});  // the map is read: the write goes to the source
  begin_migration();
  Lock lock(client, name_, {.ttl = 30s});
  EXPECT_TRUE(lock.try_lock());
  EXPECT_TRUE(on_target(name_));
  EXPECT_EQ(source_->command({"EXISTS", name_}).integer, 0);
  lock.unlock();
}

}  // namespace
}  // namespace lockon::test
