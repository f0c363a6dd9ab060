// integration/test_async_cluster_lock_redirects.cpp — the AsyncLock's
// acquisition (SET K NX and the holder record's SET in one write) while K's
// slot is being migrated: as the blocking Lock's
// (test_cluster_lock_redirects.cpp), a pipeline the source ran in part and
// refused in part was resent whole to the ASK target, where the SET won
// while K was held on the source.
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"

#include "cluster_lock_redirects_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

using AsyncClusterLockRedirects = ClusterLockRedirects;

// The AsyncLock's acquisition (SET K NX and the record's SET in one write)
// on a key held on the migrating source without a record.
TEST_F(AsyncClusterLockRedirects, AsyncTryLockOnAKeyHeldOnTheMigratingSourceFails) {
  const Client client(cluster().url());
  Lock holder(client, name_, {.ttl = 30s, .holder_record = false});
  ASSERT_TRUE(holder.try_lock());
  begin_migration();
  asio::io_context io;
  AsyncClient async_client(io.get_executor(), cluster().url());
  AsyncLock other(async_client, name_, LockOptions{.ttl = 30s});
  bool acquired = false;
  bool created_on_target = false;
  std::string error;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      acquired = co_await other.async_try_lock();
    } catch (const std::exception& e) {
      error = e.what();
    }
    created_on_target = on_target(name_);  // before any release
    if (acquired) co_await other.async_unlock();
  }, 20s));
  EXPECT_FALSE(acquired) << "two holders: K is held on the source";
  EXPECT_EQ(error, "");
  EXPECT_FALSE(created_on_target) << "K was created on the ASK target next to the source's copy";
}

}  // namespace
}  // namespace lockon::test
