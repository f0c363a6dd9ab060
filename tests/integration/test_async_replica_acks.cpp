// integration/test_async_replica_acks.cpp — LockOptions::replica_acks on the
// Asio front (issue 36 D1: it was ignored, then refused): the grant is
// rewritten and WAITed for on a connection of the client's own
// (protocol/replica_acks.hpp), so a WAIT never holds back the other
// coroutines' replies on the shared connection; fewer acknowledgements
// give the key back and throw ReplicationError. A real master and replica.
#include <asio/co_spawn.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "integration/replica_pair.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// WAITs the master has run (INFO commandstats): on localhost the replica has
// a grant within a millisecond anyway, so "on the replica" alone would not
// show that the lock waited for it.
long long waits_run(RedisServer& master) {
  const std::string stats = master.command({"INFO", "commandstats"}).str;
  const auto at = stats.find("cmdstat_wait:calls=");
  return at == std::string::npos ? 0 : std::stoll(stats.substr(at + 19));
}

TEST(AsyncReplicaAcks, AnAcknowledgedGrantIsOnTheReplica) {
  ReplicaPair pair;
  asio::io_context io;
  AsyncClient client(io.get_executor(), pair.master.url());
  for (const bool fencing : {false, true}) {
    auto options = with_acks(1, 3000ms);  // answered at once when healthy; generous under load
    options.fencing = fencing;
    AsyncLock lock(client, "acks:async", options);
    std::string on_replica;
    const long long waits_before = waits_run(pair.master);
    ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
      EXPECT_TRUE(co_await lock.async_try_lock());
      // WAIT returned 1: the replica has the grant now, not eventually.
      on_replica = pair.replica.command({"GET", "acks:async"}).str;
      co_await lock.async_unlock();
    }));
    EXPECT_FALSE(on_replica.empty()) << (fencing ? "fenced" : "plain");
    EXPECT_EQ(waits_run(pair.master), waits_before + 1) << "the grant was reported without a WAIT";
  }
}

// The replica paused: WAIT answers 0 after its timeout; the key is given
// back at once; and the other coroutines of the client were not held
// behind the WAIT (it ran on a connection of its own).
TEST(AsyncReplicaAcks, APausedReplicaGivesReplicationErrorFreesTheKeyAndStallsNoOtherCoroutine) {
  ReplicaPair pair;
  asio::io_context io;
  AsyncClient client(io.get_executor(), pair.master.url() + "?socket_timeout=300ms");
  const PausedReplica paused(pair);
  AsyncLock lock(client, "acks:async-paused", with_acks(1, 700ms));
  AsyncLock other(client, "acks:async-other", LockOptions{.ttl = 10s});
  int acknowledged = -1;
  std::string error;
  Clock::duration took{};
  Clock::duration slowest_other{};
  int other_cycles = 0;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    bool waiting = true;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
          while (waiting) {
            const auto start = Clock::now();
            if (co_await other.async_try_lock()) co_await other.async_unlock();
            slowest_other = std::max(slowest_other, Clock::now() - start);
            ++other_cycles;
          }
        },
        asio::detached);
    co_await sleep_for(50ms);
    const auto start = Clock::now();
    try {
      co_await lock.async_try_lock();
      error = "no ReplicationError";
    } catch (const ReplicationError& e) {
      acknowledged = e.acknowledged();
      error = e.what();
    }
    took = Clock::now() - start;
    waiting = false;
    co_await sleep_for(20ms);
  }));
  EXPECT_EQ(acknowledged, 0) << error;
  EXPECT_NE(error.find("0 of 1"), std::string::npos) << error;
  EXPECT_GE(took, 700ms) << "WAIT's own timeout";
  EXPECT_LT(took, 700ms + 500ms);
  EXPECT_FALSE(lock.held());
  EXPECT_GT(other_cycles, 20) << "the other coroutine kept locking during the WAIT";
  EXPECT_LT(slowest_other, 300ms) << "a cycle of the other coroutine waited behind the WAIT";
  EXPECT_EQ(pair.master.command({"EXISTS", "acks:async-paused"}).integer, 0) << "the unreplicated grant stays held";
}

// Two acquisitions WAITing at once do not queue behind each other: each
// has a connection of its own (one shared side connection made the second
// wait out the first's WAIT too, then fail with a timeout).
TEST(AsyncReplicaAcks, ConcurrentWaitsRunSideBySide) {
  ReplicaPair pair;
  asio::io_context io;
  AsyncClient client(io.get_executor(), pair.master.url() + "?socket_timeout=300ms");
  const PausedReplica paused(pair);
  AsyncLock first(client, "acks:side-1", with_acks(1, 700ms));
  AsyncLock second(client, "acks:side-2", with_acks(1, 700ms));
  int replication_errors = 0;
  std::string other_error;
  Clock::duration took{};
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    const auto start = Clock::now();
    int done = 0;
    asio::steady_timer all_done(co_await asio::this_coro::executor, Clock::time_point::max());
    for (AsyncLock* lock : {&first, &second}) {
      asio::co_spawn(
          co_await asio::this_coro::executor,
          [&, lock]() -> asio::awaitable<void> {
            try {
              co_await lock->async_try_lock();
            } catch (const ReplicationError&) {
              ++replication_errors;
            } catch (const std::exception& e) {
              other_error = e.what();
            }
            if (++done == 2) all_done.cancel();
          },
          asio::detached);
    }
    co_await all_done.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    took = Clock::now() - start;
  }));
  EXPECT_EQ(replication_errors, 2) << other_error;
  EXPECT_LT(took, 700ms + 500ms) << "the second WAIT queued behind the first";
}

// A hand-over is written by the releaser's connection: the waiter rewrites
// its token itself, then WAITs.
TEST(AsyncReplicaAcks, AHandOverIsAcknowledged) {
  ReplicaPair pair;
  asio::io_context io;
  AsyncClient client(io.get_executor(), pair.master.url());
  Client blocking(pair.master.url());
  Lock holder(blocking, "acks:async-handover", {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  AsyncLock waiter(client, "acks:async-handover", with_acks(1, 3000ms));
  bool got = false;
  bool queued = false;
  std::string on_replica;
  const long long waits_before = waits_run(pair.master);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
          got = co_await waiter.async_try_lock_for(5s);
          on_replica = pair.replica.command({"GET", "acks:async-handover"}).str;
        },
        asio::detached);
    for (int i = 0; i < 200 && pair.master.command({"LLEN", detail::companion_key("acks:async-handover", "q")}).integer != 1; ++i)
      co_await sleep_for(5ms);
    queued = pair.master.command({"LLEN", detail::companion_key("acks:async-handover", "q")}).integer == 1;
    holder.unlock();
    for (int i = 0; i < 500 && !got; ++i) co_await sleep_for(10ms);
    if (got) co_await waiter.async_unlock();
  }));
  EXPECT_TRUE(queued) << "the waiter never queued: no hand-over was tested";
  EXPECT_TRUE(got);
  EXPECT_EQ(waits_run(pair.master), waits_before + 1) << "the hand-over was reported without a WAIT";
  EXPECT_FALSE(on_replica.empty()) << "the handed grant was not on the replica when the waiter was told";
}

// The policy's replica_acks reach async_lock_on's locks (they were refused).
TEST(AsyncReplicaAcks, AsyncLockOnHonoursThePolicysAcknowledgements) {
  ReplicaPair pair;
  asio::io_context io;
  AsyncClient client(io.get_executor(), pair.master.url());
  // A healthy replica answers WAIT at once; the generous timeout is for a
  // loaded machine (ASan beside other tests: a 300 ms WAIT counted 0 of 1).
  LockerPolicy policy;
  policy.key_prefix = "acks-policy";
  policy.replica_acks = {1, 3000ms};
  AsyncLocker locker(client, policy);
  LockerPolicy paused_policy = policy;
  paused_policy.replica_acks = {1, 300ms};
  AsyncLocker paused_locker(client, paused_policy);
  int ran = 0;
  std::string on_replica;
  const auto body = [&](AsyncLockContext& context, std::string) -> asio::awaitable<void> {
    ++ran;
    on_replica = pair.replica.command({"GET", context.key()}).str;
    co_return;
  };
  auto call = locker.async_lock_on<0>("acks::fn", body);
  auto paused_call = paused_locker.async_lock_on<0>("acks::fn", body);
  bool refused = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    co_await call(std::string("x"));
    pair.replica.pause();
    try {
      co_await paused_call(std::string("y"));
    } catch (const ReplicationError&) {
      refused = true;
    }
    pair.replica.resume();
  }));
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(on_replica.empty());
  EXPECT_TRUE(refused) << "a call ran without its acknowledgement";
}

TEST(AsyncReplicaAcks, WaitForeverIsRefused) {
  asio::io_context io;
  RedisServer server;
  AsyncClient client(io.get_executor(), server.url());
  EXPECT_THROW(AsyncLock(client, "x", with_acks(1, 0ms)), ConfigError);
  EXPECT_THROW(AsyncLock(client, "x", with_acks(-1, 10ms)), ConfigError);
}

}  // namespace
}  // namespace lockon::test
