// integration/test_cluster_migrating_renewal.cpp — a lease renewed while its
// slot migrates (found by the fault harness, verify --topology cluster seed
// 41: a lock_on lease lapsed during a migration and four Locks were granted
// its key on the new owner while it ran). The renewal declares K and the
// lease's records; {K}:hs exists only after a hand-over, and while the slot
// migrates a script runs only where every key it declares exists: each
// renewal got TRYAGAIN (keys on the source) or ASK (keys moved), and the
// lease ran out. It is now sent again for K alone (protocol/renewal.hpp).
#include <chrono>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"

#include "cluster_migrating_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class ClusterMigratingRenewal : public ClusterMigrating {};

// A 1 s lease (renewed every 333 ms), taken without a hand-over: its slot
// MIGRATING for 1.5 s with the keys on the source, then 1.5 s with the keys
// on the target before the slot is handed over. Each stretch outlasts the
// lease: it survives only if renewed throughout.
TEST_F(ClusterMigratingRenewal, ALeaseTakenWithoutAHandOverIsRenewedThroughTheMigration) {
  const Client client(cluster().url());
  Lock lock(client, name_, {.ttl = 1s});
  ASSERT_TRUE(lock.try_lock());
  ASSERT_EQ(source_->command({"EXISTS", key("hs")}).integer, 0) << "the case needs a lease without {K}:hs";
  begin_migration();
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(lock.lost()) << "not renewed while the slot was MIGRATING with its keys on the source";
  cluster().migrate_keys(migration_);
  std::this_thread::sleep_for(1500ms);
  EXPECT_FALSE(lock.lost()) << "not renewed while its keys waited on the target (ASK)";
  migrating_ = false;
  cluster().finish_migration(migration_);
  moved_ = true;
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(lock.lost());
  EXPECT_TRUE(lock.owned());
  EXPECT_EQ(target_->command({"GET", name_}).is_nil(), false) << "K is not on the slot's new owner";
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
}

}  // namespace
}  // namespace lockon::test
