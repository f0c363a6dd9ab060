// integration/test_async_sentinel_replica_wake.cpp — an AsyncLock waiting
// through a Sentinel failover keeps its turn (session 20).
//
// The blocking Lock's SentinelReplicaWake tests (test_sentinel_replica_wake.cpp)
// show two holders when a waiter's subscriber, back on the demoted old
// master, hears a wake-up the new master counted unheard. The async client
// closes the old master's subscriber when it switches, so its waiters do
// not hear the demoted master in that sequence; but their queue entry still
// names the closed subscriber, and a release on the new master counts every
// grant to them unheard and withdraws it: the waiter loses its turn to
// whoever queued behind it (and under steady contention may never get one).
// Here W queues behind H on M1; SENTINEL FAILOVER promotes M2; once the
// sentinels have demoted M1, X queues on M2; H releases on M2. W, queued
// first, must get K first, and W and X never hold it at once.
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "integration/sentinel_failover_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kKey = "areplica_wake:lock";

struct Turn {
  std::atomic<bool> done{false};
  std::atomic<bool> got{false};
  std::atomic<bool> saw_other_inside{false};
  std::atomic<long long> got_at_ns{0};
  std::string error;
};

void enter(Turn& turn, std::atomic<int>& inside) {
  turn.got = true;
  turn.got_at_ns = Clock::now().time_since_epoch().count();
  if (inside.fetch_add(1) > 0) turn.saw_other_inside = true;
}

void leave(Turn& turn, std::atomic<int>& inside) {
  if (inside.fetch_sub(1) > 1) turn.saw_other_inside = true;
}

TEST(AsyncSentinelReplicaWake, WaiterKeepsItsTurnThroughTheFailover) {
  SentinelSet set;
  const int old_port = set.master_port_by_sentinel();
  ASSERT_NE(old_port, 0);
  RedisServer& m1 = set.server_on(old_port);
  const std::string queue = detail::companion_key(kKey, "q");

  Client h_client(set.url(kShortTimeouts));
  LockOptions h_options;
  h_options.ttl = 60s;
  Lock h(h_client, kKey, h_options);
  ASSERT_TRUE(h.try_lock());

  // W: an AsyncLock on its own loop and thread.
  std::atomic<int> inside{0};
  Turn w;
  asio::io_context io;
  AsyncClient w_client(io.get_executor(), set.url(kShortTimeouts));
  std::thread w_thread([&] {
    try {
      run_on(io, [&]() -> asio::awaitable<void> {
        AsyncLock lock(w_client, kKey, LockOptions{.ttl = 60s});
        if (co_await lock.async_try_lock_for(50s)) {
          enter(w, inside);
          co_await sleep_for(500ms);
          leave(w, inside);
          co_await lock.async_unlock();
        }
      }, 60s);
    } catch (const std::exception& e) {
      w.error = e.what();
    }
    w.done = true;
  });
  ASSERT_TRUE(queued_on_master_and_replica(set, m1, queue, 1));

  int new_port = 0;
  ASSERT_TRUE(fail_over_and_demote(set, old_port, new_port));
  RedisServer& m2 = set.server_on(new_port);
  ASSERT_FALSE(w.done.load()) << "W stopped waiting: " << w.error;

  // X (blocking) queues on M2 behind W's entry.
  Turn x;
  Client x_client(set.url(kShortTimeouts));
  std::thread x_thread([&] {
    try {
      LockOptions options;
      options.ttl = 60s;
      Lock lock(x_client, kKey, options);
      if (lock.try_lock_for(50s)) {
        enter(x, inside);
        std::this_thread::sleep_for(3s);
        leave(x, inside);
        lock.unlock();
      }
    } catch (const std::exception& e) {
      x.error = e.what();
    }
    x.done = true;
  });
  const bool x_queued = eventually(10s, [&] { return llen(m2, queue) == 2; });
  const bool h_switched = follows_to(h_client, new_port);
  h.unlock();
  const std::exception_ptr h_error = h.last_unlock_error();
  w_thread.join();
  x_thread.join();
  std::printf("[async-replica-wake] W: got=%d saw_other=%d error='%s'\n", w.got.load(), w.saw_other_inside.load(),
              w.error.c_str());
  std::printf("[async-replica-wake] X: got=%d saw_other=%d error='%s'\n", x.got.load(), x.saw_other_inside.load(),
              x.error.c_str());
  ASSERT_TRUE(x_queued) << "X did not queue behind W on the new master (LLEN " << llen(m2, queue) << ")";
  ASSERT_TRUE(h_switched) << "H's client did not follow the switch";
  ASSERT_FALSE(h_error) << "H's release failed";
  EXPECT_FALSE(w.saw_other_inside.load() || x.saw_other_inside.load()) << "W and X held K at the same time";
  EXPECT_TRUE(w.got.load()) << "W never got K: " << w.error;
  EXPECT_TRUE(x.got.load()) << "X never got K: " << x.error;
  if (w.got.load() && x.got.load()) {
    EXPECT_LT(w.got_at_ns.load(), x.got_at_ns.load()) << "W, queued first, lost its turn to X in the failover";
  }
}

}  // namespace
}  // namespace lockon::test
