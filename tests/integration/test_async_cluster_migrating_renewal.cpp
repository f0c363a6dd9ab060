// integration/test_async_cluster_migrating_renewal.cpp — AsyncLock's lease
// renewed while its slot migrates (test_cluster_migrating_renewal.cpp for the
// blocking Lock): a renewal a migrating slot refuses for the lease's records
// is sent again for K alone (protocol/renewal.hpp).
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"

#include "cluster_migrating_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncClusterMigratingRenewal : public ClusterMigrating {};

TEST_F(AsyncClusterMigratingRenewal, ALeaseTakenWithoutAHandOverIsRenewedThroughTheMigration) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), cluster().url());
  AsyncLock lock(client, name_, LockOptions{.ttl = 1s});
  bool lost_on_source = true, lost_on_target = true, lost_after = true;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock());
    EXPECT_EQ(source_->command({"EXISTS", key("hs")}).integer, 0) << "the case needs a lease without {K}:hs";
    begin_migration();
    co_await sleep_for(1500ms);
    lost_on_source = lock.lost();
    cluster().migrate_keys(migration_);
    co_await sleep_for(1500ms);
    lost_on_target = lock.lost();
    migrating_ = false;
    cluster().finish_migration(migration_);
    moved_ = true;
    co_await sleep_for(700ms);
    lost_after = lock.lost();
    co_await lock.async_unlock();
  }));
  EXPECT_FALSE(lost_on_source) << "not renewed while the slot was MIGRATING with its keys on the source";
  EXPECT_FALSE(lost_on_target) << "not renewed while its keys waited on the target (ASK)";
  EXPECT_FALSE(lost_after);
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
}

}  // namespace
}  // namespace lockon::test
