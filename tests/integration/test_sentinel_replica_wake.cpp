// integration/test_sentinel_replica_wake.cpp — a wake-up delivered by a
// replica is not a grant (found by review, session 20).
//
// A release hands K to a waiter by PUBLISHing on the waiter's channel, and
// reads PUBLISH's receiver count as "that waiter's process still listens":
// 0 withdraws the grant and hands K to the next waiter. Outside a cluster
// Redis also propagates PUBLISH (from a script too) to the replicas, which
// deliver it to *their* subscribers, while the master counts only its own.
// After a Sentinel failover, a waiter queued on the old master keeps its
// subscriber connected to the old master's address; the sentinels demote
// that server (REPLICAOF + CLIENT KILL TYPE pubsub), the subscriber
// reconnects and subscribes again — now on a replica of the new master. A
// release on the new master then counts the waiter's wake-up unheard, gives
// K to the next waiter, and the replica delivers the withdrawn wake-up all
// the same: two holders, unless a waiter trusts only a wake-up from the
// subscriber of the key's current node that stayed connected since its last
// attempt (lock_wait.cpp).
//
// The real sequence, with real sentinels (support/sentinel_fixture): W
// queues behind H on the first master M1; SENTINEL FAILOVER promotes M2; the
// sentinels demote M1 (a few seconds later); X queues on M2 behind W; H
// releases on M2. W and X each mark when they hold K; they must never hold
// it at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "common/test_hooks.hpp"
#include "integration/sentinel_failover_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/read_write_lock.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kReplicaWakeKey = "replica_wake:lock";

// One waiter's account: whether it got K, whether K held its token when it
// looked right after (owned(): a round trip to the current master), and
// whether someone else was inside when it entered.
struct Turn {
  std::atomic<bool> done{false};
  std::atomic<bool> got{false};
  std::atomic<bool> owned_after{false};
  std::atomic<bool> saw_other_inside{false};
  std::atomic<long long> got_at_ns{0};
  std::string error;
};

void take_turn(ExclusiveKind kind, Client& client, Turn& turn, std::atomic<int>& inside,
               std::chrono::milliseconds hold, std::chrono::seconds wait) {
  try {
    const auto enter = [&] {
      turn.got = true;
      turn.got_at_ns = Clock::now().time_since_epoch().count();
      if (inside.fetch_add(1) > 0) turn.saw_other_inside = true;
    };
    const auto leave = [&] {
      std::this_thread::sleep_for(hold);
      if (inside.fetch_sub(1) > 1) turn.saw_other_inside = true;
    };
    if (kind == ExclusiveKind::lock) {
      LockOptions options;
      options.ttl = 60s;  // long: a hand-over is trusted without a round trip for ttl/2 (confirm_lease)
      Lock lock(client, kReplicaWakeKey, options);
      if (lock.try_lock_for(wait)) {
        enter();
        try {
          turn.owned_after = lock.owned();
        } catch (const std::exception& e) {
          turn.error += std::string("owned(): ") + e.what() + "; ";
        }
        leave();
        lock.unlock();
      }
    } else {
      ReadWriteLockOptions options;
      options.ttl = 60s;  // as above (SharedHolder: handed_in_time)
      ReadWriteLock lock(client, kReplicaWakeKey, options);
      if (lock.try_lock_for(wait)) {
        enter();
        turn.owned_after = true;  // no round-trip check here: the overlap count decides
        leave();
        lock.unlock();
      }
    }
  } catch (const std::exception& e) {
    turn.error += e.what();
  }
  turn.done = true;
}

// The whole scenario; `move_waits`: whether W may move its wait to the new
// master's subscriber (the fix does; false keeps it listening on the
// demoted master, where only wake_trusted stands between W and K).
void replica_wake_scenario(ExclusiveKind kind, bool move_waits) {
  detail::test_hooks::move_waits_after_failover = move_waits;
  struct Restore {
    ~Restore() { detail::test_hooks::move_waits_after_failover = true; }
  } restore;
  SentinelSet set;
  const int old_port = set.master_port_by_sentinel();
  ASSERT_NE(old_port, 0);
  RedisServer& m1 = set.server_on(old_port);
  const std::string queue = detail::companion_key(kReplicaWakeKey, kind == ExclusiveKind::lock ? "q" : "sq");

  // H holds K on M1 for a long lease.
  Client h_client(set.url(kShortTimeouts));
  LockOptions h_options;
  h_options.ttl = 60s;
  Lock h_lock(h_client, kReplicaWakeKey, h_options);
  ReadWriteLockOptions h_rw_options;
  h_rw_options.ttl = 60s;
  ReadWriteLock h_rw(h_client, kReplicaWakeKey, h_rw_options);
  ASSERT_TRUE(kind == ExclusiveKind::lock ? h_lock.try_lock() : h_rw.try_lock());

  // W queues behind H on M1 (its subscriber connects to M1).
  std::atomic<int> inside{0};
  Turn w;
  Client w_client(set.url(kShortTimeouts));
  std::thread w_thread([&] { take_turn(kind, w_client, w, inside, 500ms, 50s); });
  ASSERT_TRUE(queued_on_master_and_replica(set, m1, queue, 1));

  // The failover: M2 promoted; the sentinels then demote M1 (REPLICAOF M2,
  // CLIENT KILL TYPE pubsub) once it still reports itself master.
  int new_port = 0;
  ASSERT_TRUE(fail_over_and_demote(set, old_port, new_port));
  RedisServer& m2 = set.server_on(new_port);
  // Where W listens now: on the demoted M1 (its subscriber reconnected to
  // the address it was made for), unless W moved its wait to M2.
  const std::string pattern = detail::companion_key(kReplicaWakeKey, "wake:*");
  const bool w_on_replica = eventually(3s, [&] {
    try {
      return !m1.command({"PUBSUB", "CHANNELS", pattern}).elements.empty();
    } catch (...) {
      return false;
    }
  });
  std::printf("[replica-wake] W's wake channel subscribed on the demoted master: %s\n", w_on_replica ? "yes" : "no");
  ASSERT_FALSE(w.done.load()) << "W stopped waiting: " << w.error;

  // X queues on M2 behind W's entry.
  Turn x;
  Client x_client(set.url(kShortTimeouts));
  std::thread x_thread([&] { take_turn(kind, x_client, x, inside, 3s, 50s); });
  const bool x_queued = eventually(10s, [&] { return llen(m2, queue) == 2; });

  // H's client has followed the switch (its release must run on M2).
  const bool h_switched = follows_to(h_client, new_port);
  std::exception_ptr h_error;
  if (kind == ExclusiveKind::lock) {
    h_lock.unlock();
    h_error = h_lock.last_unlock_error();
  } else {
    h_rw.unlock();
    h_error = h_rw.last_unlock_error();
  }

  w_thread.join();
  x_thread.join();
  std::printf("[replica-wake] W: got=%d owned_after=%d saw_other=%d error='%s'\n", w.got.load(),
              w.owned_after.load(), w.saw_other_inside.load(), w.error.c_str());
  std::printf("[replica-wake] X: got=%d owned_after=%d saw_other=%d error='%s'\n", x.got.load(),
              x.owned_after.load(), x.saw_other_inside.load(), x.error.c_str());
  ASSERT_TRUE(x_queued) << "X did not queue behind W on the new master (LLEN " << llen(m2, queue) << ")";
  ASSERT_TRUE(h_switched) << "H's client did not follow the switch";
  ASSERT_FALSE(h_error) << "H's release failed";
  EXPECT_FALSE(w.saw_other_inside.load() || x.saw_other_inside.load()) << "W and X held K at the same time";
  if (w.got.load()) {
    EXPECT_TRUE(w.owned_after.load()) << "W's lock() returned true while K held another token";
  }
  if (x.got.load()) {
    EXPECT_TRUE(x.owned_after.load()) << "X's lock() returned true while K held another token";
  }
  // Liveness: both get their turn (W possibly after X).
  EXPECT_TRUE(w.got.load()) << "W never got K: " << w.error;
  EXPECT_TRUE(x.got.load()) << "X never got K: " << x.error;
  // Moved in place, W keeps its turn ahead of X.
  if (move_waits && w.got.load() && x.got.load()) {
    EXPECT_LT(w.got_at_ns.load(), x.got_at_ns.load()) << "W lost its place moving to the new master";
  }
}

// W's subscriber stays on the demoted master: the wake-up it delivers is
// no proof, W's next attempt on the new master decides (K holds X's token:
// W waits; it gets K after X).
TEST(SentinelReplicaWake, WakeUpDeliveredByTheDemotedMasterIsNotAGrant) {
  replica_wake_scenario(ExclusiveKind::lock, false);
}

// As shipped: W moves its wait to the new master's subscriber when the
// client follows the switch, and keeps its place (ahead of X).
TEST(SentinelReplicaWake, WaiterFollowsTheFailoverToTheNewMaster) { replica_wake_scenario(ExclusiveKind::lock, true); }

// The same for a ReadWriteLock's writers (the shared locks' hand-over,
// shared_holder.cpp; a Semaphore's permits go through the same code).
TEST(SentinelReplicaWake, SharedWakeUpDeliveredByTheDemotedMasterIsNotAGrant) {
  replica_wake_scenario(ExclusiveKind::writer, false);
}
TEST(SentinelReplicaWake, SharedWaiterFollowsTheFailoverToTheNewMaster) {
  replica_wake_scenario(ExclusiveKind::writer, true);
}

}  // namespace
}  // namespace lockon::test
