// integration/test_shared_cluster.cpp — ReadWriteLock and Semaphore on a
// Redis Cluster (issue 16): the holders, the queue and the wake channel are
// in the name's slot, and hand-overs arrive by sharded pub/sub (SPUBLISH) on
// every shard.
#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "client/slots.hpp"
#include "cluster_test_fixture.hpp"
#include "lockon/client.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "shared_lease_support.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class SharedOnCluster : public ClusterTest {};

TEST_F(SharedOnCluster, WriterHandsOverToQueuedReadersOnEveryShard) {
  const Client holder_client(cluster().url());
  const Client waiter_client(cluster().url(), PoolOptions{.size = 8});
  for (RedisServer* master : cluster().masters()) {
    const std::string name = name_on(*master, "rw");
    ReadWriteLock writer(holder_client, name, {.ttl = 20s});
    ASSERT_TRUE(writer.try_lock());
    std::atomic<int> inside{0}, peak{0};
    std::atomic<long long> latest_ms{-1};
    std::atomic<Clock::time_point> released_at{Clock::time_point::max()};  // read by the waiter
    Crew readers;
    readers.run(2, [&](int) {
      ReadWriteLock reader(waiter_client, name, {.ttl = 20s, .wait_poll_interval = 10s});
      if (!reader.try_lock_shared_for(8s)) return;
      raise_peak(peak, ++inside);
      raise_peak(latest_ms, ms_since(released_at.load()));
      std::this_thread::sleep_for(50ms);
      --inside;
      reader.unlock_shared();
    });
    bool listening = false;
    for (int i = 0; i < 200 && !listening; ++i) {
      listening = master->command({"LLEN", "{" + name + "}:sq"}).integer == 2;
      if (!listening) std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(listening) << "readers not queued on master " << master->port();
    released_at = Clock::now();
    writer.unlock();
    readers.join();
    EXPECT_EQ(readers.errors(), "");
    EXPECT_EQ(peak.load(), 2) << "the two readers were not handed the lock together";
    EXPECT_GE(latest_ms.load(), 0);
    EXPECT_LT(latest_ms.load(), 1000) << "hand-over on master " << master->port() << " was not delivered";
  }
}

TEST_F(SharedOnCluster, SemaphoreCountsAndHandsOverOnEveryShard) {
  const Client client(cluster().url(), PoolOptions{.size = 8});
  for (RedisServer* master : cluster().masters()) {
    const std::string name = name_on(*master, "sem");
    Semaphore a(client, name, 2), b(client, name, 2);
    ASSERT_TRUE(a.try_acquire());
    ASSERT_TRUE(b.try_acquire());
    std::atomic<long long> took{-1};
    std::thread waiter([&] {
      Semaphore c(client, name, 2, {.wait_poll_interval = 10s});
      const auto start = Clock::now();
      if (c.try_acquire_for(8s)) took = ms_since(start);
    });
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(took.load(), -1) << "a third permit was granted";
    a.release();
    waiter.join();
    EXPECT_GE(took.load(), 190);
    EXPECT_LT(took.load(), 1200) << "hand-over on master " << master->port() << " was not delivered";
    b.release();
  }
}

}  // namespace
}  // namespace lockon::test
