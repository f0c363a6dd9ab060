// integration/test_async_cluster.cpp — the async client on a real Redis
// Cluster (3 masters, 3 replicas): lock/unlock/fence on every master; 1,000
// coroutines on 20 keys across slots with exact counters; a blocking Lock and
// an AsyncLock excluding each other and handing over both ways; a half-moved
// slot (ASK) and a moved slot (MOVED) under a waiting AsyncLock, which
// follows its slot's shard channel; async_lock_on on a cluster; and a
// SIGKILLed master while coroutines wait (typed errors within deadlines, no
// hang, locking again after the replica's promotion). The crash runs last.
#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "async/async_client_impl.hpp"
#include "client/slots.hpp"
#include "cluster_test_fixture.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::key_slot;

class AsyncCluster : public ClusterTest {
 protected:
  asio::io_context io;
};

// Runs `io` on its own thread while the test thread acts (migrations,
// blocking locks); joined by the destructor.
class IoThread {
 public:
  explicit IoThread(asio::io_context& io) : io_(io), guard_(io.get_executor()) {
    io_.restart();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~IoThread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }

 private:
  asio::io_context& io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// WAIT runs on a connection of the client's own, which an async Cluster
// client does not have per node: replica_acks is refused before anything is
// sent, not silently ignored.
TEST_F(AsyncCluster, ReplicaAcksAreRefusedBeforeAnythingIsSent) {
  AsyncClient client(io.get_executor(), cluster().url());
  LockOptions options;
  options.replica_acks = {1, 100ms};
  EXPECT_THROW(AsyncLock(client, "acks:cluster", options), ConfigError);
}

TEST_F(AsyncCluster, LockUnlockAndFenceOnEveryMaster) {
  AsyncClient client(io.get_executor(), cluster().url());
  const auto masters = cluster().masters();
  ASSERT_EQ(masters.size(), 3u);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::set<int> slots;
    for (RedisServer* master : masters) {
      for (const bool fencing : {false, true}) {
        const std::string name = name_on(*master, fencing ? "fenced" : "plain");
        slots.insert(key_slot(name));
        AsyncLock lock(client, name, LockOptions{.ttl = 5s, .fencing = fencing});
        AsyncLock rival(client, name, LockOptions{.ttl = 5s});
        EXPECT_TRUE(co_await lock.async_try_lock());
        EXPECT_FALSE(co_await rival.async_try_lock()) << name;
        EXPECT_EQ(master->command({"EXISTS", name}).integer, 1) << "the key lives on its slot's master";
        if (fencing) {
          EXPECT_GE(lock.fence(), 1'000'000'000'000'000ULL) << "server-clock based fence";
          const std::uint64_t first = lock.fence();
          co_await lock.async_unlock();
          EXPECT_TRUE(co_await lock.async_try_lock());
          EXPECT_GT(lock.fence(), first) << "fences grow per key";
        }
        co_await lock.async_unlock();
        EXPECT_EQ(master->command({"EXISTS", name}).integer, 0) << "released";
        EXPECT_TRUE(co_await rival.async_try_lock());
        co_await rival.async_unlock();
      }
    }
    EXPECT_EQ(slots.size(), 6u);
    // A keyless command goes to some master.
    std::vector<std::string> ping{"PING"};
    const Reply pong = co_await client.async_command(ping);
    EXPECT_EQ(pong.as_string(), "PONG");
  }));
}

TEST_F(AsyncCluster, ThousandCoroutinesOnTwentyKeysAcrossSlotsStayExact) {
  constexpr int kCoroutines = 1000;
  constexpr int kKeys = 20;
  constexpr int kRounds = 2;
  AsyncClient client(io.get_executor(), cluster().url() + "?socket_timeout=5000");
  const std::string prefix = unique_key("acl-exact");
  std::vector<std::string> names;
  std::set<int> owners;
  for (int k = 0; k < kKeys; ++k) {
    names.push_back(prefix + ":" + std::to_string(k));
    owners.insert(cluster().owner_of_slot(key_slot(names.back())).port());
  }
  ASSERT_EQ(owners.size(), 3u) << "the keys span every master";
  int finished = 0;
  int failed = 0;
  int timeouts = 0;
  const auto start = Clock::now();
  for (int c = 0; c < kCoroutines; ++c) {
    asio::co_spawn(io, [&, c]() -> asio::awaitable<void> {
      const std::string& name = names[static_cast<std::size_t>(c % kKeys)];
      const std::string counter = "{" + name + "}:n";
      for (int round = 0; round < kRounds; ++round) {
        AsyncLock lock(client, name, LockOptions{.ttl = 30s, .wait_poll_interval = 500ms});
        if (!co_await lock.async_try_lock_for(60s)) {
          ++timeouts;
          co_return;
        }
        std::vector<std::string> get{"GET", counter};
        const Reply value = co_await client.async_command(get);
        const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
        std::vector<std::string> set{"SET", counter, std::to_string(next)};
        co_await client.async_command(set);
        co_await lock.async_unlock();
      }
    }, [&](std::exception_ptr error) {
      ++finished;
      if (error) ++failed;
      if (finished == kCoroutines) io.stop();
    });
  }
  io.run_for(120s);
  ASSERT_EQ(finished, kCoroutines) << "hung";
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(timeouts, 0);
  const long long per_key = kCoroutines / kKeys * kRounds;
  for (const std::string& name : names) {
    RedisServer& owner = cluster().owner_of_slot(key_slot(name));
    EXPECT_EQ(owner.command({"GET", "{" + name + "}:n"}).str, std::to_string(per_key)) << name;
    EXPECT_EQ(owner.command({"EXISTS", name}).integer, 0);
  }
  std::cout << kCoroutines * kRounds << " async lock cycles on " << kKeys << " cluster keys in " << ms_since(start)
            << " ms\n";
}

TEST_F(AsyncCluster, BlockingLockAndAsyncLockExcludeAndHandOverBothWays) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[2], "mixed");
  AsyncClient client(io.get_executor(), cluster().url());
  const Client blocking(cluster().url());
  // Blocking holder -> async waiter.
  Lock holder(blocking, name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<long long> released_ns{0};
  std::jthread releaser([&] {
    std::this_thread::sleep_for(400ms);
    released_ns = Clock::now().time_since_epoch().count();
    holder.unlock();
  });
  long long waited_after_release = -1;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, LockOptions{.ttl = 10s, .wait_poll_interval = 10s});
    EXPECT_FALSE(co_await lock.async_try_lock()) << "excluded by the blocking holder";
    EXPECT_TRUE(co_await lock.async_try_lock_for(8s));
    waited_after_release = (Clock::now().time_since_epoch().count() - released_ns.load()) / 1'000'000;
    Lock other(blocking, name, {.ttl = 10s});
    EXPECT_FALSE(other.try_lock()) << "the blocking side is excluded by the async holder";
    co_await lock.async_unlock();
  }));
  releaser.join();
  EXPECT_GE(waited_after_release, 0);
  EXPECT_LT(waited_after_release, 1000) << "hand-over by SPUBLISH, not by the 10 s poll";
  // Async holder -> blocking waiter.
  long long blocking_waited_after_release = -1;
  AsyncLock async_holder(client, name, LockOptions{.ttl = 10s});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { EXPECT_TRUE(co_await async_holder.async_try_lock()); }));
  std::atomic<long long> async_released_ns{0};
  std::jthread waiter([&] {
    Lock lock(blocking, name, {.ttl = 10s, .wait_poll_interval = 10s});
    if (lock.try_lock_for(8s)) {
      blocking_waited_after_release = (Clock::now().time_since_epoch().count() - async_released_ns.load()) / 1'000'000;
      lock.unlock();
    }
  });
  const std::string queue = "{" + name + "}:q";
  for (int i = 0; i < 300 && masters[2]->command({"LLEN", queue}).integer < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    async_released_ns = Clock::now().time_since_epoch().count();
    co_await async_holder.async_unlock();
  }));
  waiter.join();
  EXPECT_GE(blocking_waited_after_release, 0) << "the blocking waiter never got the lock";
  EXPECT_LT(blocking_waited_after_release, 1000) << "hand-over to the blocking waiter by SPUBLISH";
}

TEST_F(AsyncCluster, SyncAndAsyncLockOnExcludeEachOther) {
  AsyncClient client(io.get_executor(), cluster().url());
  const std::string prefix = unique_key("acl-lockon");
  AsyncLocker locker(client, {.timeout = 20s, .key_prefix = prefix});
  RedisLocker sync_locker(cluster().url(), {.timeout = 20s, .key_prefix = prefix});
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> calls{0};
  auto async_fn = locker.async_lock_on<0>("shared", [&](int) -> asio::awaitable<void> {
    if (inside.fetch_add(1) != 0) ++overlaps;
    co_await sleep_for(2ms);
    inside.fetch_sub(1);
    ++calls;
  });
  auto sync_fn = sync_locker.lock_on<0>("shared", [&](int) {
    if (inside.fetch_add(1) != 0) ++overlaps;
    std::this_thread::sleep_for(2ms);
    inside.fetch_sub(1);
    ++calls;
  });
  std::jthread sync_side([&] {
    for (int i = 0; i < 40; ++i) sync_fn(7);
  });
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (int i = 0; i < 40; ++i) co_await async_fn(7);
  }));
  sync_side.join();
  EXPECT_EQ(calls.load(), 80);
  EXPECT_EQ(overlaps.load(), 0);
}

// ASK: the slot is half-moved (its keys migrated, SETSLOT NODE not sent
// yet): a single-key request (the fast path's SET NX) meets ASK at the
// source and is resent with ASKING to the target. Multi-key requests (the
// release script, the fenced MULTI) get TRYAGAIN there until the migration
// ends; they are retried with back-off, and once it ends they meet MOVED
// (the client's map is stale) and are resent to the new owner.
TEST_F(AsyncCluster, AskTryagainAndMovedDuringASlotMigration) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[0], "ask");
  const int slot = key_slot(name);
  // The release below waits out a 1.5 s migration: bounded by the 3 s socket
  // timeout (a count of back-offs used to end it after 16 ASKs, ~0.9 s).
  AsyncClient client(io.get_executor(), cluster().url() + "?socket_timeout=3s");
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock warm(client, name, LockOptions{.ttl = 10s});
    EXPECT_TRUE(co_await warm.async_try_lock());  // the map is read, the slot on masters[0]
    co_await warm.async_unlock();
  }));
  const auto migration = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(migration);
  AsyncLock held(client, name, LockOptions{.ttl = 10s});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { EXPECT_TRUE(co_await held.async_try_lock()); }));
  ASSERT_TRUE(held.held());
  {
    RawConnection target = masters[1]->connect();
    ASSERT_TRUE(target.command({"ASKING"}).is("OK"));
    EXPECT_EQ(target.command({"EXISTS", name}).integer, 1) << "written to the importing node via ASK";
  }
  EXPECT_EQ(masters[0]->command({"EXISTS", name}).integer, 0);
  const auto refreshes_before = client.impl()->cluster()->refreshes();
  std::atomic<bool> done{false};
  std::atomic<bool> failed{false};
  std::atomic<bool> fenced_ok{false};
  std::exception_ptr unlock_error;
  {
    IoThread runner(io);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      co_await held.async_unlock();  // TRYAGAIN until the migration ends, then MOVED
      unlock_error = held.last_unlock_error();
      AsyncLock fenced(client, name, LockOptions{.ttl = 10s, .fencing = true});
      fenced_ok = co_await fenced.async_try_lock_for(5s);
      EXPECT_GT(fenced.fence(), 0u);
      co_await fenced.async_unlock();
    }, [&](std::exception_ptr error) {
      failed = error != nullptr;
      done = true;
    });
    std::this_thread::sleep_for(1500ms);
    EXPECT_FALSE(done.load()) << "the release ended while the slot was still half-moved";
    cluster().finish_migration(migration);
    for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(done.load()) << "hung";
  EXPECT_FALSE(failed.load());
  std::string unlock_text;
  if (unlock_error) {
    try {
      std::rethrow_exception(unlock_error);
    } catch (const std::exception& e) {
      unlock_text = e.what();
    }
  }
  EXPECT_EQ(unlock_text, "") << "the release was retried through TRYAGAIN and MOVED";
  EXPECT_TRUE(fenced_ok.load());
  EXPECT_EQ(masters[1]->command({"EXISTS", name}).integer, 0) << "released on the new owner";
  EXPECT_GT(client.impl()->cluster()->refreshes(), refreshes_before) << "MOVED marked the map stale";
  const auto back = cluster().begin_migration(slot, *masters[0]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// A waiting AsyncLock's slot moves to another master: the waiter follows it
// (subscribes on the new master's shard channel) and the hand-over after the
// move arrives by message.
TEST_F(AsyncCluster, WaiterFollowsItsSlotToTheNewMaster) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[1], "afollow");
  const int slot = key_slot(name);
  const Client blocking(cluster().url());
  Lock holder(blocking, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());
  AsyncClient client(io.get_executor(), cluster().url());
  std::atomic<long long> acquired_after{-1};
  std::atomic<long long> released_ns{0};
  std::atomic<bool> done{false};
  std::atomic<bool> failed{false};
  {
    IoThread runner(io);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      AsyncLock lock(client, name, LockOptions{.ttl = 20s, .wait_poll_interval = 10s});
      if (co_await lock.async_try_lock_for(8s)) {
        acquired_after = (Clock::now().time_since_epoch().count() - released_ns.load()) / 1'000'000;
        co_await lock.async_unlock();
      }
    }, [&](std::exception_ptr error) {
      failed = error != nullptr;
      done = true;
    });
    const std::string queue = "{" + name + "}:q";
    for (int i = 0; i < 300 && masters[1]->command({"LLEN", queue}).integer < 1; ++i)
      std::this_thread::sleep_for(10ms);
    ASSERT_EQ(masters[1]->command({"LLEN", queue}).integer, 1);
    const auto migration = cluster().begin_migration(slot, *masters[2]);
    cluster().migrate_keys(migration);
    cluster().finish_migration(migration);
    bool listening = false;
    for (int i = 0; i < 500 && !listening; ++i) {
      listening = !masters[2]->command({"PUBSUB", "SHARDCHANNELS", "{" + name + "}:wake:*"}).elements.empty();
      if (!listening) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(listening) << "the async waiter never subscribed on the slot's new master";
    std::this_thread::sleep_for(100ms);
    released_ns = Clock::now().time_since_epoch().count();
    holder.unlock();
    for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(done.load()) << "hung";
  EXPECT_FALSE(failed.load());
  EXPECT_GE(acquired_after.load(), 0) << "the waiter never got the lock";
  EXPECT_LT(acquired_after.load(), 1000) << "the hand-over after the move was not delivered by message";
  const auto back = cluster().begin_migration(slot, *masters[1]);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

std::string outage_error_kind(const std::exception& e) {
  if (dynamic_cast<const ConnectError*>(&e)) return "ConnectError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const ClosedError*>(&e)) return "ClosedError";
  if (dynamic_cast<const ServerBusyError*>(&e)) return "ServerBusyError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return std::string("untyped ") + typeid(e).name();
}

// A master is SIGKILLed while 40 coroutines wait on its keys (and 20 use
// another master's): every call ends within its deadline plus a bound, with
// a typed lockon error or a timeout; the other master's keys keep working;
// after the replica's promotion the dead master's keys lock again. Runs
// last: the killed node stays down.
TEST_F(AsyncCluster, ZzKilledMasterGivesTypedErrorsWithinDeadlinesThenRecovers) {
  auto masters = cluster().masters();
  RedisServer& victim = *masters[0];
  RedisServer& replica = cluster().replica_of(victim);
  AsyncClient client(io.get_executor(), cluster().url() + "?connect_timeout=300&socket_timeout=500");
  std::vector<std::string> doomed;
  for (int i = 0; i < 4; ++i) doomed.push_back(name_on(victim, "akill-" + std::to_string(i)));
  const std::string healthy = name_on(*masters[1], "akill-ok");
  constexpr auto kDeadline = 1500ms;
  std::atomic<bool> stop{false};
  std::atomic<long long> kill_ns{0};
  std::atomic<long long> first_ok_after_kill_ns{0};
  std::atomic<long long> healthy_after_kill{0};
  std::atomic<long long> longest_call_ms{0};
  std::map<std::string, int> errors;  // on the io thread only, read after join
  std::atomic<int> finished{0};
  constexpr int kDoomed = 40;
  constexpr int kHealthy = 20;
  {
    IoThread runner(io);
    for (int c = 0; c < kDoomed + kHealthy; ++c) {
      asio::co_spawn(io, [&, c]() -> asio::awaitable<void> {
        const bool on_victim = c < kDoomed;
        const std::string& name = on_victim ? doomed[static_cast<std::size_t>(c % doomed.size())] : healthy;
        for (int i = 0; i < 100000 && !stop; ++i) {
          const auto start = Clock::now();
          const long long started_ns = start.time_since_epoch().count();
          bool pause = false;
          try {
            AsyncLock lock(client, name, LockOptions{.ttl = 5s, .wait_poll_interval = 200ms});
            if (co_await lock.async_try_lock_for(kDeadline)) {
              co_await sleep_for(5ms);
              co_await lock.async_unlock();
              if (kill_ns.load() != 0 && started_ns > kill_ns.load()) {
                if (on_victim && first_ok_after_kill_ns.load() == 0)
                  first_ok_after_kill_ns = Clock::now().time_since_epoch().count();
                if (!on_victim) ++healthy_after_kill;
              }
            }
          } catch (const std::exception& e) {
            ++errors[outage_error_kind(e)];
            pause = true;
          }
          longest_call_ms = std::max<long long>(longest_call_ms.load(), ms_since(start));
          if (pause) co_await sleep_for(20ms);
        }
      }, [&](std::exception_ptr error) {
        if (error) ++errors["escaped"];
        ++finished;
      });
    }
    std::this_thread::sleep_for(500ms);
    kill_ns = Clock::now().time_since_epoch().count();
    victim.kill();
    const auto killed_at = Clock::now();
    while (first_ok_after_kill_ns.load() == 0 && ms_since(killed_at) < 30'000) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(300ms);
    stop = true;
    for (int i = 0; i < 1000 && finished.load() < kDoomed + kHealthy; ++i) std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(finished.load(), kDoomed + kHealthy) << "a coroutine hung";
  const long long recovered_ms = (first_ok_after_kill_ns.load() - kill_ns.load()) / 1'000'000;
  std::cout << "async crash failover: first lock cycle on the dead master's keys " << recovered_ms
            << " ms after SIGKILL (cluster-node-timeout 2000 ms); longest call " << longest_call_ms.load()
            << " ms; healthy-master cycles meanwhile " << healthy_after_kill.load() << "\n";
  for (const auto& [kind, count] : errors) std::cout << "  " << kind << ": " << count << "\n";
  for (const auto& [kind, count] : errors) EXPECT_TRUE(kind.find("untyped") == std::string::npos && kind != "escaped") << kind;
  EXPECT_GT(first_ok_after_kill_ns.load(), 0) << "never recovered";
  EXPECT_LT(recovered_ms, 10'000);
  EXPECT_GT(healthy_after_kill.load(), 0) << "the other masters' keys must keep working";
  // try_lock_for(1.5 s) + one connect/socket timeout for a request already
  // sent + the clean-up's socket timeout.
  EXPECT_LT(longest_call_ms.load(), 4000) << "a call outlived its deadline by far";
  EXPECT_EQ(replica.command({"ROLE"}).elements.at(0).str, "master");
}

}  // namespace
}  // namespace lockon::test
