// integration/test_cluster_wake_trust.cpp — when a hand-over message proves
// a grant on a Redis Cluster (lock/wake_proof.hpp), two rules of 35004cd:
//
//  - the node check ("the message came from the subscriber of the node that
//    serves K now") is skipped on a Cluster: a slot that leaves a node
//    unsubscribes its shard channel there, and the check's map lookup would
//    re-read a stale map inside the hand-over;
//  - a waiter that follows its slot to another master listens on that
//    master's subscriber, whose connection generations are its own: it
//    trusts nothing heard there before its next attempt.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "common/test_hooks.hpp"
#include "support/fixtures.hpp"
#include "support/steady_time.hpp"
#include "client/cluster_topology.hpp"
#include "client/slots.hpp"
#include "protocol/lock_scripts.hpp"
#include "lock/subscriber.hpp"
#include "lock/wake_proof.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"

#include "cluster_test_fixture.hpp"

// A namespace of its own: its stall hooks and llen() are not those of the
// same names in test_untrusted_handover_deadline.cpp and
// sentinel_failover_support.hpp, which a unity build may compile into the
// same translation unit.
namespace lockon::test::cluster_wake_trust {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::key_slot;

class ClusterWakeTrust : public ClusterTest {
 protected:
  void TearDown() override { detail::test_hooks::after_heard_sampled = nullptr; }
};

long long llen(RedisServer& server, const std::string& key) {
  try {
    return server.command({"LLEN", key}).integer;
  } catch (...) {
    return -1;
  }
}

// Attacks: "on a Cluster the hand-over is taken without the node check,
// whose map lookup could re-read the map inside a hand-over" (wake_proof.hpp,
// 35004cd). The waiter's Client marks its slot map stale the ordinary way:
// one of its calls to another master times out (that master paused for a
// moment, as a busy or restarting node would be), and nothing of that
// Client routes a call afterwards. Then the holder releases: the hand-over
// must not cost the waiter a map read (a new connection and CLUSTER SHARDS,
// per node asked until one answers) before it may run.
//
// Fails without the fix (`if (sharded) return true;` removed from
// wake_proves_grant): "the hand-over re-read the slot map: 1 refresh(es)"
// (the waiter's map was read once between the release and its grant; 0
// with the fix).
TEST_F(ClusterWakeTrust, HandOverWhileTheMapIsStaleReadsNoMap) {
  const auto masters = cluster().masters();
  const std::string name = name_on(*masters[0], "trust-map");
  const std::string other_key = name_on(*masters[1], "stale-probe");
  const std::string queue = detail::companion_key(name, "q");
  const Client holder_client(cluster().url());
  Lock holder(holder_client, name, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());

  const Client waiter_client(cluster().url() + "?socket_timeout=300");
  auto& map = dynamic_cast<detail::ClusterTopology&>(waiter_client.impl()->topology());
  waiter_client.command({"GET", other_key});  // a pooled connection to masters[1]
  std::atomic<long long> refreshes_at_grant{-1};
  std::atomic<long long> granted_ns{0};
  std::jthread waiter([&] {
    // No lease renewal: adding it to the watchdog looks the key's master up
    // (watchdog.cpp, Watchdog::add), which re-reads a stale map too, on the
    // way out of lock() (with or without the fix); this test is about the
    // hand-over's own check.
    Lock lock(waiter_client, name, {.ttl = 20s, .auto_renew = false, .wait_poll_interval = 10s});
    if (lock.try_lock_for(8s)) {
      refreshes_at_grant = static_cast<long long>(map.refreshes());  // before anything else routes a call
      granted_ns = now_ns();
      lock.unlock();
    }
  });
  ASSERT_TRUE(eventually(3s, [&] { return llen(*masters[0], queue) == 1; })) << "the waiter did not queue";

  // The map goes stale: a call of this Client to masters[1] times out.
  masters[1]->pause();
  bool timed_out = false;
  try {
    waiter_client.command({"GET", other_key});
  } catch (const Error&) {
    timed_out = true;
  }
  masters[1]->resume();
  ASSERT_TRUE(timed_out) << "the call to the paused master did not fail";
  std::this_thread::sleep_for(200ms);  // past ClusterTopology::kRefreshInterval: a lookup would re-read now

  const long long refreshes_before = static_cast<long long>(map.refreshes());
  const long long released_ns = now_ns();
  holder.unlock();
  waiter.join();
  ASSERT_GE(refreshes_at_grant.load(), 0) << "the waiter never got the lock";
  const long long handover_us = (granted_ns.load() - released_ns) / 1000;
  std::printf("[cluster-wake-trust] hand-over with a stale map: %lld us, map reads in it: %lld\n", handover_us,
              refreshes_at_grant.load() - refreshes_before);
  EXPECT_EQ(refreshes_at_grant.load() - refreshes_before, 0)
      << "the hand-over re-read the slot map: " << refreshes_at_grant.load() - refreshes_before << " refresh(es)";
}

// The waiter the test holds still after it sampled its subscriber's
// connection generation for an attempt, before it sends it: a thread
// descheduled there while the slot moves, made deterministic.
thread_local bool is_held_waiter = false;
std::atomic<int> samples_seen{0};
std::atomic<bool> held{false};
std::atomic<bool> release_held{false};

void hold_second_sample() {
  if (!is_held_waiter || ++samples_seen != 2) return;  // 1: the attempt that queued
  held = true;
  const auto until = Clock::now() + 30s;  // a failing test must not hang
  while (!release_held && Clock::now() < until) std::this_thread::sleep_for(1ms);
}

// Attacks: "follow_slot trusts nothing heard before its next attempt
// (generations are per subscriber)" (lock_wait.cpp, 35004cd). W queues on
// M0 (its subscriber there: connection generation 1) and samples 1 for its
// next attempt; the slot moves to M1 before that attempt is sent. The
// attempt follows the MOVED (W's entry is on M1 now), and W follows the slot
// to M1's subscriber, a new one: its first connection, generation 1 too.
// Then a wake-up that is no grant arrives there before W's next attempt:
// published by the test, it stands for the one a demoted master delivers
// after a failover (SentinelReplicaWake; in a Cluster the demoted master
// still receives the shard's SPUBLISH and serves SSUBSCRIBE). K holds H's
// token throughout: W must not return holding it.
//
// Why a hook and a published message, not a failover alone: a waiter that
// learns of the move the ordinary way (the server's sunsubscribe nudges it)
// samples 0 (channel not subscribed) for the attempt that follows the MOVED,
// and 0 is never trusted; and every message a master delivers on a
// subscribed channel is a grant that stands (the release counted that
// subscriber). The rule matters only when the move lands between sampling
// and sending, and the new master is then demoted before W's next attempt.
//
// Fails without the fix (the `heard_generation = 0` line removed from
// follow_slot): "W returned holding K while K held H's token" (W's
// try_lock_for returned true, owned() false; GET K = H's token).
TEST_F(ClusterWakeTrust, AfterFollowingItsSlotAWaiterTrustsNoWakeUpBeforeItsNextAttempt) {
  const auto masters = cluster().masters();
  RedisServer& m0 = *masters[0];
  RedisServer& m1 = *masters[1];
  const std::string name = name_on(m0, "trust-follow");
  const int slot = key_slot(name);
  const std::string queue = detail::companion_key(name, "q");
  const Client holder_client(cluster().url());
  Lock holder(holder_client, name, {.ttl = 20s, .token = "h-token-" + name});
  ASSERT_TRUE(holder.try_lock());

  samples_seen = 0;
  held = false;
  release_held = false;
  detail::test_hooks::after_heard_sampled = &hold_second_sample;
  const Client waiter_client(cluster().url());
  std::atomic<int> w_got{-1};
  std::atomic<int> w_owned_after{-1};
  std::jthread waiter([&] {
    is_held_waiter = true;
    Lock lock(waiter_client, name, {.ttl = 20s, .wait_poll_interval = 500ms, .handoff_spin = 0us});
    const bool got = lock.try_lock_for(4s);
    if (got) {
      try {
        w_owned_after = lock.owned() ? 1 : 0;
      } catch (...) {
      }
      lock.unlock();
    }
    w_got = got ? 1 : 0;
  });
  struct Release {
    ~Release() { release_held = true; }
  } release_on_exit;

  ASSERT_TRUE(eventually(5s, [&] { return held.load(); })) << "W never made a second attempt";
  ASSERT_EQ(llen(m0, queue), 1) << "W is not queued on M0";
  // The slot (K, its queue) moves to M1 while W's attempt is not sent.
  const auto migration = cluster().begin_migration(slot, m1);
  cluster().migrate_keys(migration);
  cluster().finish_migration(migration);
  release_held = true;

  // W follows the MOVED and listens on M1.
  const std::string pattern = detail::companion_key(name, "wake:*");
  ASSERT_TRUE(eventually(3s, [&] { return !m1.command({"PUBSUB", "SHARDCHANNELS", pattern}).elements.empty(); }))
      << "W never subscribed on M1";
  const RawReply entries = m1.command({"LRANGE", queue, "0", "-1"});
  ASSERT_EQ(entries.elements.size(), 1u) << "W's entry did not move with the slot";
  // Entry: "<subscriber id>|<waiter id>|<ttl>|<fencing>|<token>".
  const std::string& entry = entries.elements[0].str;
  const auto bar1 = entry.find('|');
  const auto bar2 = entry.find('|', bar1 + 1);
  ASSERT_NE(bar2, std::string::npos) << entry;
  const std::string subscriber_id = entry.substr(0, bar1);
  const std::string waiter_id = entry.substr(bar1 + 1, bar2 - bar1 - 1);
  const RawReply heard =
      m1.command({"SPUBLISH", detail::wake_channel(name, subscriber_id), waiter_id + " 1"});
  EXPECT_EQ(heard.integer, 1) << "nobody listened on W's channel on M1";

  waiter.join();
  const std::string k_now = m1.command({"GET", name}).str;
  std::printf("[cluster-wake-trust] W got=%d owned_after=%d, K holds '%s'\n", w_got.load(), w_owned_after.load(),
              k_now.c_str());
  EXPECT_EQ(k_now, "h-token-" + name);
  EXPECT_EQ(w_got.load(), 0) << "W returned holding K while K held H's token (owned() = " << w_owned_after.load()
                             << ")";
  holder.unlock();
  const auto back = cluster().begin_migration(slot, m0);
  cluster().migrate_keys(back);
  cluster().finish_migration(back);
}

// The waiters the demotion probe holds still in their first wait, between
// their look at their slot and their bid to read the socket (Subscriber
// hook); W's slot is kept to see whether the demoted wake-up reached it.
thread_local bool is_stalled_waiter = false;
thread_local bool is_main_stalled_waiter = false;
std::atomic<bool> stall_armed{false};
std::atomic<bool> resume_stalled{false};
thread_local bool stalled_already = false;
std::atomic<int> stalled_count{0};
std::atomic<detail::Subscriber::Slot*> stalled_slot{nullptr};

// Holds each marked thread once, in its first wait.
void stall_once(detail::Subscriber::Slot& slot) {
  if (!is_stalled_waiter || stalled_already || !stall_armed) return;
  stalled_already = true;
  if (is_main_stalled_waiter) stalled_slot = &slot;
  ++stalled_count;
  const auto until = Clock::now() + 60s;  // a failing test must not hang
  while (!resume_stalled && Clock::now() < until) std::this_thread::sleep_for(1ms);
}

// Probes the trust rule itself on a Cluster (not a fix of 35004cd; found
// while writing the tests above). A master demoted by a failover tells its
// shard-channel subscribers `sunsubscribe`; the subscriber asks again after
// kMovedRetry on the same connection, and the demoted master, a replica of
// the shard now, serves SSUBSCRIBE and delivers the new master's SPUBLISH —
// including the wake-up of a grant the new master withdrew (it counted no
// subscriber of ours there). The connection never dropped, so its
// generation is the one W sampled before the failover: if W has not made an
// attempt since (held still here; in production a thread descheduled for
// ≥ 100 ms), the message passes as proof and W holds K beside X. V, a
// second waiter of W's Client on another key of M0, is held still too, so
// the subscriber's thread keeps reading M0 for both.
//
// Failed before the subscription epoch (session 21): "W's slot before it
// resumes: handed=1 (generation 1)", "W got=1 owned=0, X got=1, overlap=1"
// — two holders, 5 of 5 runs. The node check would not catch it either (W's
// map still names M0). The re-subscription on the same connection now
// changes what a message carries, so W's next attempt decides. (The test
// waits for R0 to list M0 as its replica: before that, R0 did not always
// send its SPUBLISH to M0 yet and nothing was attacked; it says so then.)
TEST_F(ClusterWakeTrust, WakeUpDeliveredByADemotedMasterIsNotAGrant) {
  auto masters = cluster().masters();
  RedisServer& m0 = *masters[2];
  RedisServer& r0 = cluster().replica_of(m0);
  const std::string name = name_on(m0, "trust-demoted");
  const std::string other = name_on(m0, "trust-demoted-other");
  const std::string queue = detail::companion_key(name, "q");
  const Client holder_client(cluster().url());
  Lock holder(holder_client, name, {.ttl = 20s});
  Lock other_holder(holder_client, other, {.ttl = 20s});
  ASSERT_TRUE(holder.try_lock());
  ASSERT_TRUE(other_holder.try_lock());

  detail::test_hooks::before_direct_read = &stall_once;
  stall_armed = true;
  stalled_count = 0;
  stalled_slot = nullptr;
  resume_stalled = false;
  struct Restore {
    ~Restore() {
      resume_stalled = true;
      detail::test_hooks::before_direct_read = nullptr;
    }
  };
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::atomic<int> w_got{-1};
  std::atomic<int> w_owned{-1};
  std::atomic<int> x_got{-1};
  const auto enter = [&] {
    if (inside.fetch_add(1) > 0) overlap = true;
  };
  const auto leave = [&] {
    if (inside.fetch_sub(1) > 1) overlap = true;
  };
  // W and V share a Client: with two waiters its subscriber's thread reads
  // (and so reads the sunsubscribe, and asks again) while W is held still.
  const Client waiter_client(cluster().url());
  std::jthread w_thread([&] {
    is_stalled_waiter = true;
    is_main_stalled_waiter = true;
    Lock lock(waiter_client, name, {.ttl = 20s, .wait_poll_interval = 10s, .handoff_spin = 0us});
    const bool got = lock.try_lock_for(30s);
    w_got = got ? 1 : 0;
    if (got) {
      enter();
      try {
        w_owned = lock.owned() ? 1 : 0;
      } catch (...) {
      }
      std::this_thread::sleep_for(500ms);
      leave();
      lock.unlock();
    }
  });
  std::jthread v_thread([&] {
    is_stalled_waiter = true;  // held still too: it would follow the failover, leaving W alone to read
    Lock lock(waiter_client, other, {.ttl = 20s, .wait_poll_interval = 10s});
    if (lock.try_lock_for(30s)) lock.unlock();
  });
  Restore restore;
  ASSERT_TRUE(eventually(5s, [&] { return stalled_count.load() == 2 && stalled_slot.load() != nullptr; }))
      << "W and V never waited";
  ASSERT_TRUE(eventually(5s, [&] { return llen(m0, queue) == 1; })) << "W did not queue";

  // The failover: R0 promoted, M0 demoted; R0 must know M0 as its replica
  // (it sends its SPUBLISH to the nodes of its shard) and M0 be in sync.
  cluster().failover(r0);
  const std::string r0_id = cluster().node_id(r0);
  const std::string m0_address = ":" + std::to_string(m0.port()) + "@";
  ASSERT_TRUE(eventually(10s, [&] {
    try {
      bool listed = false;
      for (const RawReply& line : r0.command({"CLUSTER", "REPLICAS", r0_id}).elements)
        listed = listed || line.str.find(m0_address) != std::string::npos;
      return listed && m0.command({"INFO", "replication"}).str.find("master_link_status:up") != std::string::npos;
    } catch (...) {
      return false;
    }
  })) << "M0 did not become R0's replica";
  // X queues behind W and listens on R0 (its own Client).
  const Client x_client(cluster().url());
  std::jthread x_thread([&] {
    Lock lock(x_client, name, {.ttl = 20s, .wait_poll_interval = 10s});
    const bool got = lock.try_lock_for(20s);
    x_got = got ? 1 : 0;
    if (got) {
      enter();
      std::this_thread::sleep_for(1500ms);
      leave();
      lock.unlock();
    }
  });
  const std::string pattern = detail::companion_key(name, "wake:*");
  ASSERT_TRUE(eventually(5s, [&] { return llen(r0, queue) == 2; })) << "X did not queue on R0";
  ASSERT_TRUE(eventually(5s, [&] { return !r0.command({"PUBSUB", "SHARDCHANNELS", pattern}).elements.empty(); }));
  const bool w_channel_on_demoted = eventually(2s, [&] {
    try {
      return !m0.command({"PUBSUB", "SHARDCHANNELS", pattern}).elements.empty();
    } catch (...) {
      return false;
    }
  });
  std::printf("[cluster-wake-trust] W's channel subscribed on the demoted master: %s\n",
              w_channel_on_demoted ? "yes" : "no");
  holder.unlock();  // on R0: W's grant withdrawn (unheard there), K to X
  // The demoted master delivers the withdrawn wake-up; the thread dispatches
  // it to W's slot (not always within the wait: the roles settle in steps).
  detail::Subscriber::Slot& w_slot = *stalled_slot.load();
  const bool delivered = eventually(3s, [&] {
    std::lock_guard lock(w_slot.mutex);
    return w_slot.handed;
  });
  {
    std::lock_guard lock(w_slot.mutex);
    std::printf("[cluster-wake-trust] W's slot before it resumes: handed=%d (generation %llu) nudged=%d\n",
                w_slot.handed, static_cast<unsigned long long>(w_slot.handed_generation), w_slot.nudged);
  }
  resume_stalled = true;
  w_thread.join();
  x_thread.join();
  other_holder.unlock();
  v_thread.join();
  std::printf("[cluster-wake-trust] demoted: W got=%d owned=%d, X got=%d, overlap=%d\n", w_got.load(), w_owned.load(),
              x_got.load(), overlap.load());
  if (!delivered) std::printf("[cluster-wake-trust] the demoted master's wake-up never reached W: not attacked\n");
  EXPECT_FALSE(overlap.load()) << "W and X held K at the same time";
  if (w_got.load() == 1) {
    EXPECT_EQ(w_owned.load(), 1) << "W returned holding K while K held another token";
  }
  EXPECT_EQ(x_got.load(), 1);
  cluster().failover(m0);  // the original roles for later tests
}

}  // namespace
}  // namespace lockon::test::cluster_wake_trust
