// integration/test_shared_cluster.cpp — ReadWriteLock and Semaphore on a
// Redis Cluster (issue 16): the holders, the queue and the wake channel are
// in the name's slot, and hand-overs arrive by sharded pub/sub (SPUBLISH) on
// every shard.
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
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

// A semaphore waiter queued before its name's slot moves follows it: the old
// master's sunsubscribe nudges it, its next attempt follows the MOVED, and it
// listens on the new master's shard channel. Otherwise the release there
// publishes the hand-over to nobody, the script takes the unheard waiter out
// of the queue, and a waiter that queued behind it (after the move) gets the
// permit first.
TEST_F(SharedOnCluster, QueuedWaiterFollowsItsSlotAndKeepsItsPlace) {
  const auto masters = cluster().masters();
  RedisServer& from = *masters[1];
  RedisServer& to = *masters[2];
  const std::string name = name_on(from, "sem-follow");
  const std::string queue = "{" + name + "}:sq";
  const Client holder_client(cluster().url());
  Semaphore holder(holder_client, name, 1, {.ttl = 20s});
  ASSERT_TRUE(holder.try_acquire());
  constexpr auto kHold = 1200ms;
  std::atomic<int> turns{0};
  std::atomic<int> first_turn{-1}, second_turn{-1};
  std::atomic<long long> first_after_release{-1};
  std::atomic<Clock::time_point> released_at{Clock::time_point::max()};
  std::mutex errors_mutex;
  std::string errors;
  const auto waiter = [&](std::atomic<int>* turn, std::atomic<long long>* after_release) {
    return [&, turn, after_release] {
      try {
        const Client mine(cluster().url());
        Semaphore permit(mine, name, 1, {.ttl = 20s, .wait_poll_interval = 10s});
        if (!permit.try_acquire_for(8s)) return;
        if (after_release != nullptr) *after_release = ms_since(released_at.load());
        *turn = turns++;
        std::this_thread::sleep_for(kHold);
        permit.release();
      } catch (const std::exception& error) {
        const std::lock_guard lock(errors_mutex);
        errors += std::string(error.what()) + "\n";
      }
    };
  };
  std::jthread first(waiter(&first_turn, &first_after_release));
  for (int i = 0; i < 300 && from.command({"LLEN", queue}).integer < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(from.command({"LLEN", queue}).integer, 1);
  const auto migration = cluster().begin_migration(detail::key_slot(name), to);
  cluster().migrate_keys(migration);
  cluster().finish_migration(migration);
  bool listening = false;
  for (int i = 0; i < 200 && !listening; ++i) {
    listening = !to.command({"PUBSUB", "SHARDCHANNELS", "{" + name + "}:wake:*"}).elements.empty();
    if (!listening) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(listening) << "the queued waiter never subscribed on the slot's new master";
  std::thread second(waiter(&second_turn, nullptr));
  for (int i = 0; i < 300 && to.command({"LLEN", queue}).integer < 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(to.command({"LLEN", queue}).integer, 2);
  released_at = Clock::now();
  holder.release();
  first.join();
  second.join();
  EXPECT_EQ(errors, "");
  EXPECT_EQ(first_turn.load(), 0) << "the waiter queued first lost its place after the move";
  EXPECT_EQ(second_turn.load(), 1);
  std::cout << "the waiter that followed its slot got the permit " << first_after_release.load()
            << " ms after the release\n";
  EXPECT_GE(first_after_release.load(), 0);
  EXPECT_LT(first_after_release.load(), 1000) << "the hand-over after the move was not delivered by message";
  const auto back = cluster().begin_migration(detail::key_slot(name), from);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

}  // namespace
}  // namespace lockon::test
