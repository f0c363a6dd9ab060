// integration/test_cluster.cpp — Redis Cluster (issue 14) against a real
// 3-master / 3-replica cluster started once for the suite: routing of Client
// commands and locks to every shard, clear cross-slot errors, mutual
// exclusion across 4 processes over keys on all shards, hand-overs by
// SPUBLISH/SSUBSCRIBE on every shard, awkward names, the CLI. Moves and
// failovers: test_cluster_moves.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <typeinfo>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/slots.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/lockon.hpp"
#include "lockon/redlock.hpp"
#include "cluster_test_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::key_slot;

TEST_F(ClusterTest, ClientCommandsRouteByKeyToEveryShard) {
  const Client client(cluster().url());
  client.ping();
  const std::string prefix = unique_key("route");
  for (int i = 0; i < 300; ++i) client.command({"SET", prefix + ":" + std::to_string(i), std::to_string(i)});
  for (int i = 0; i < 300; ++i)
    ASSERT_EQ(client.command({"GET", prefix + ":" + std::to_string(i)}).as_string(), std::to_string(i));
  // Each key sits on its slot's master, and every master got some.
  std::map<int, int> per_master;
  for (int i = 0; i < 300; ++i) {
    const std::string key = prefix + ":" + std::to_string(i);
    RedisServer& owner = cluster().owner_of_slot(key_slot(key));
    ASSERT_EQ(owner.command({"EXISTS", key}).integer, 1) << key;
    ++per_master[owner.port()];
  }
  EXPECT_EQ(per_master.size(), 3u);
  for (const auto& [port, count] : per_master) EXPECT_GT(count, 50) << port;
  // Scripts route by their first key; same-slot pipelines work.
  const std::string tagged = "{" + prefix + "}:";
  EXPECT_EQ(client.command({"EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", tagged + "a", "x"}).as_string(), "OK");
  const auto replies = client.pipeline({{"SET", tagged + "b", "1"}, {"INCR", tagged + "b"}, {"GET", tagged + "a"}});
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[1].as_integer(), 2);
  EXPECT_EQ(replies[2].as_string(), "x");
}

TEST_F(ClusterTest, CrossSlotOperationsFailWithAnErrorNamingTheKeys) {
  const Client client(cluster().url());
  const std::string a = unique_key("xa");
  std::string b = unique_key("xb");
  while (key_slot(b) == key_slot(a)) b += "x";
  try {
    client.command({"MSET", a, "1", b, "2"});
    FAIL() << "MSET over two slots succeeded";
  } catch (const ReplyError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), "CROSSSLOT");
    EXPECT_NE(what.find(a), std::string::npos) << what;
    EXPECT_NE(what.find(b), std::string::npos) << what;
    EXPECT_NE(what.find("hash tag"), std::string::npos) << what;
  }
  try {
    client.pipeline({{"SET", a, "1"}, {"SET", b, "2"}});
    FAIL() << "a pipeline over two slots was sent";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(a), std::string::npos) << what;
    EXPECT_NE(what.find(b), std::string::npos) << what;
  }
  EXPECT_EQ(cluster().owner_of_slot(key_slot(a)).command({"EXISTS", a}).integer, 0) << "nothing ran";
}

TEST_F(ClusterTest, LocksOnManyKeysLiveOnTheirSlotsMaster) {
  const Client client(cluster().url());
  std::map<int, int> per_master;
  for (int i = 0; i < 120; ++i) {
    const std::string name = unique_key("many-" + std::to_string(i));
    Lock lock(client, name, {.ttl = 5s, .fencing = true});
    ASSERT_TRUE(lock.try_lock()) << name;
    RedisServer& owner = cluster().owner_of_slot(key_slot(name));
    EXPECT_EQ(owner.command({"EXISTS", name}).integer, 1) << name;
    EXPECT_GT(lock.fence(), 0u);
    ++per_master[owner.port()];
    lock.unlock();
    EXPECT_EQ(owner.command({"EXISTS", name}).integer, 0) << name;
  }
  EXPECT_EQ(per_master.size(), 3u);
}

TEST_F(ClusterTest, FourProcessesExcludeEachOtherOnKeysOfAllShards) {
  constexpr int kWorkers = 4;
  constexpr int kKeys = 9;
  constexpr int kRounds = 40;
  const std::string prefix = unique_key("mx");
  std::set<int> masters;
  for (int k = 0; k < kKeys; ++k)
    masters.insert(cluster().owner_of_slot(key_slot(prefix + ":" + std::to_string(k))).port());
  ASSERT_EQ(masters.size(), 3u) << "the keys do not cover every shard";
  const auto start = Clock::now();
  std::vector<Child> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.push_back(spawn(worker_argv("cluster_increment", {cluster().url(), prefix, std::to_string(kKeys), std::to_string(kRounds)})));
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(120s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  std::cout << kWorkers * kKeys * kRounds << " critical sections on a cluster took " << ms_since(start) << " ms\n";
  const Client client(cluster().url());
  for (int k = 0; k < kKeys; ++k) {
    const Reply value = client.command({"GET", "{" + prefix + ":" + std::to_string(k) + "}:n"});
    EXPECT_EQ(value.as_string(), std::to_string(kWorkers * kRounds)) << "key " << k;
  }
}

// A waiter on each shard is handed the lock by message: well before its
// poll interval (10 s here) would have let it look again.
TEST_F(ClusterTest, HandOverOnEveryShardArrivesBySharedPubSub) {
  const Client holder_client(cluster().url());
  const Client waiter_client(cluster().url());
  for (RedisServer* master : cluster().masters()) {
    const std::string name = name_on(*master, "handover");
    Lock holder(holder_client, name, {.ttl = 20s});
    ASSERT_TRUE(holder.try_lock());
    std::atomic<long long> acquired_after{-1};
    Clock::time_point released_at;
    std::thread waiter([&] {
      Lock lock(waiter_client, name, {.ttl = 20s, .wait_poll_interval = 10s});
      if (lock.try_lock_for(8s)) {
        acquired_after = ms_since(released_at);
        lock.unlock();
      }
    });
    // The waiter listens on its key's shard channel on the owning master.
    bool listening = false;
    for (int i = 0; i < 200 && !listening; ++i) {
      const RawReply channels = master->command({"PUBSUB", "SHARDCHANNELS", "*wake*"});
      listening = !channels.elements.empty();
      if (!listening) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(listening) << "no shard channel on master " << master->port();
    std::this_thread::sleep_for(100ms);  // queued behind the holder
    released_at = Clock::now();
    holder.unlock();
    waiter.join();
    EXPECT_GE(acquired_after.load(), 0) << "never acquired on master " << master->port();
    EXPECT_LT(acquired_after.load(), 1000) << "hand-over on master " << master->port() << " was not delivered";
  }
}

// Names the old companion-key rule put in two slots (an empty "{}", a "}"
// before the first "{"): on a cluster every path works with them (fenced
// MULTI, the 4-key scripts of a contended hand-over).
TEST_F(ClusterTest, AwkwardNamesWorkOnEveryPath) {
  const Client client(cluster().url());
  for (const std::string base : {"a{}b", "}x{y}", "{}", "x}"}) {
    const std::string name = base + unique_key("awk");
    Lock holder(client, name, {.ttl = 5s, .fencing = true});
    ASSERT_TRUE(holder.try_lock()) << name;
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      const Client mine(cluster().url());
      Lock lock(mine, name, {.ttl = 5s, .fencing = true, .wait_poll_interval = 10s});
      if (lock.try_lock_for(5s)) {
        got = true;
        EXPECT_GT(lock.fence(), holder.fence());
        lock.unlock();
      }
    });
    std::this_thread::sleep_for(100ms);
    const auto released = Clock::now();
    holder.unlock();
    waiter.join();
    EXPECT_TRUE(got.load()) << name;
    EXPECT_LT(ms_since(released), 1500) << name;
  }
}

// lock_on over a cluster: each call's key lives on its slot's master while
// the function runs, and calls over many arguments reach every master.
TEST_F(ClusterTest, LockOnRoutesEachCallsKeyToItsMaster) {
  const RedisLocker locker(Client(cluster().url()), {.key_prefix = unique_key("lockon")});
  std::map<int, int> per_master;
  const auto locked = locker.lock_on<0>("cluster::work", [&](LockContext& context, int item) {
    RedisServer& owner = cluster().owner_of_slot(key_slot(context.key()));
    EXPECT_EQ(owner.command({"EXISTS", context.key()}).integer, 1) << context.key();
    ++per_master[owner.port()];
    return item * 2;
  });
  for (int i = 0; i < 60; ++i) ASSERT_EQ(locked(i), 2 * i);
  EXPECT_EQ(per_master.size(), 3u);
  for (const auto& [port, count] : per_master) EXPECT_GT(count, 5) << port;
}

TEST_F(ClusterTest, RedlockRefusesAClusterNode) {
  const Client node(cluster().url());
  try {
    Redlock redlock(std::vector<Client>{node}, unique_key("redlock-on-cluster"));
    FAIL() << "Redlock accepted a cluster as a node";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Redis Cluster"), std::string::npos) << e.what();
  }
}

// `lockon run --url redis-cluster://...`: 4 shell loops x 50 runs of a racy
// read-sleep-write increment, exactly like the single-server CLI test.
TEST_F(ClusterTest, CliRunOnAClusterIncrementsExactly) {
  const std::filesystem::path dir = make_temp_dir("lockon-cli-cluster");
  const auto file = [&](const std::string& name) { return (dir / name).string(); };
  {
    std::ofstream(dir / "increment.sh") << "#!/bin/sh\nprintf + >> \"$2\"\nn=$(cat \"$1\")\nsleep 0.002\n"
                                           "echo $((n + 1)) > \"$1\"\nprintf - >> \"$2\"\n";
    std::ofstream(dir / "counter") << "0\n";
    std::ofstream(dir / "log") << "";
  }
  std::filesystem::permissions(dir / "increment.sh", std::filesystem::perms::owner_all);
  constexpr int kWorkers = 4;
  constexpr int kRounds = 50;
  const std::string name = unique_key("cli-counter");
  const std::string loop = "i=0; while [ $i -lt " + std::to_string(kRounds) +
                           " ]; do \"$LOCKON\" run --url \"$URL\" \"$NAME\" -- \"$SCRIPT\" \"$COUNTER\" \"$LOG\" || exit $?; "
                           "i=$((i + 1)); done";
  const std::map<std::string, std::string> env{{"LOCKON", LOCKON_CLI},          {"URL", cluster().url()},
                                               {"NAME", name},                  {"SCRIPT", file("increment.sh")},
                                               {"COUNTER", file("counter")},    {"LOG", file("log")}};
  const auto start = Clock::now();
  std::vector<Child> workers;
  for (int w = 0; w < kWorkers; ++w) workers.push_back(spawn({"/bin/sh", "-c", loop}, env));
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(100s);
    EXPECT_TRUE(result.succeeded()) << result.describe();
  }
  std::cout << kWorkers * kRounds << " lockon runs on a cluster took " << ms_since(start) << " ms\n";
  EXPECT_EQ(read_file(file("counter")), std::to_string(kWorkers * kRounds) + "\n");
  std::string expected_log;
  for (int i = 0; i < kWorkers * kRounds; ++i) expected_log += "+-";
  EXPECT_EQ(read_file(file("log")), expected_log) << "critical sections overlapped";
  EXPECT_EQ(cluster().owner_of_slot(key_slot(name)).command({"EXISTS", name}).integer, 0) << "lock left behind";
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace lockon::test
