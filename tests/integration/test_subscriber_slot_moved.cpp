// integration/test_subscriber_slot_moved.cpp — a channel's slot moves away
// (Redis Cluster: the old master sends `sunsubscribe`) while the process's
// lone waiter reads the subscriber socket itself (lock/subscriber.hpp). The
// thread may still be polling that socket too (its "who reads" decision is
// taken once per loop and was made while two waiters waited), and then it is
// the thread that reads the sunsubscribe and nudges the waiter. The waiter
// polls the socket, not its condition variable, so the thread must poke it:
// otherwise the waiter sleeps until the next bytes on the socket (the reply
// to the subscription's retry, kMovedRetry later at best, or later still if
// the old master is slow to answer) or its deadline.
#include <chrono>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/test_hooks.hpp"
#include "client/slots.hpp"
#include "cluster_test_fixture.hpp"
#include "protocol/lock_scripts.hpp"
#include "lock/subscriber.hpp"
#include "lockon/options.hpp"
#include "support/fault_proxy.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Subscriber;

class SubscriberSlotMoved : public ClusterTest {};

// What the hooks need (a function pointer captures nothing).
struct SlotMoveInterleaving {
  RedisCluster* cluster = nullptr;
  RedisCluster::Migration migration;
  FaultProxy* proxy = nullptr;
  std::optional<Subscriber::Watch>* other = nullptr;
  bool left = false;
  bool moved = false;
  bool nudged = false;
  Clock::time_point polling_from{};
};
SlotMoveInterleaving* slot_move_interleaving = nullptr;

// Before the waiter's bid to read directly: the other waiter leaves, so the
// bid succeeds, while the thread, which last looked when two waited, still
// polls the socket.
void other_waiter_leaves(Subscriber::Slot&) {
  SlotMoveInterleaving& it = *slot_move_interleaving;
  if (it.left) return;
  it.left = true;
  it.other->reset();
}

// The waiter is the direct reader but not yet polling: the slot moves away,
// and the thread reads the server's sunsubscribe and nudges the waiter. The
// subscription's retry (100 ms later) is then held back on the way to the
// old master, so its -MOVED answer cannot wake the waiter in the thread's
// stead (a slow path to the old master).
void slot_moves_before_the_poll(Subscriber::Slot& slot) {
  SlotMoveInterleaving& it = *slot_move_interleaving;
  if (it.moved) return;
  it.moved = true;
  it.cluster->finish_migration(it.migration);
  const auto until = Clock::now() + 5s;
  while (Clock::now() < until && !it.nudged) {
    {
      std::lock_guard lock(slot.mutex);
      it.nudged = slot.nudged;
    }
    if (!it.nudged) std::this_thread::sleep_for(1ms);
  }
  if (it.nudged) it.proxy->add_rule({.command = "SSUBSCRIBE", .action = FaultAction::delay, .delay = 2s, .times = 1});
  it.polling_from = Clock::now();
}

TEST_F(SubscriberSlotMoved, SunsubscribeReadByTheThreadWakesTheDirectReader) {
  const auto masters = cluster().masters();
  RedisServer& from = *masters[0];
  const std::string name = name_on(from, "direct-moved");
  FaultProxy proxy(from.host(), from.port());
  Subscriber subscriber(ConnectionOptions::from_url(proxy.url()), /*sharded=*/true);
  const std::string channel = detail::wake_channel(name, subscriber.id());
  std::optional<Subscriber::Watch> a(subscriber.watch("a", channel));
  Subscriber::Watch b = subscriber.watch("b", channel);
  ASSERT_TRUE(b.wait_subscribed(Clock::now() + 5s));
  ASSERT_TRUE(a->wait_subscribed(Clock::now() + 5s));
  // Two quick SETSLOTs: the thread, which just read the confirmation, is
  // still well inside its 1 s poll when the waiter takes the socket.
  SlotMoveInterleaving it{&cluster(), cluster().begin_migration(detail::key_slot(name), *masters[1]), &proxy, &a};
  slot_move_interleaving = &it;
  detail::test_hooks::before_direct_read = &other_waiter_leaves;
  detail::test_hooks::before_direct_poll = &slot_moves_before_the_poll;
  const Subscriber::Slot::Wake wake = b.wait_until(Clock::now() + 8s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - it.polling_from);
  detail::test_hooks::before_direct_read = nullptr;
  detail::test_hooks::before_direct_poll = nullptr;
  slot_move_interleaving = nullptr;
  ASSERT_TRUE(it.left);
  ASSERT_TRUE(it.moved) << "the waiter never read the socket directly (interleaving not forced)";
  ASSERT_TRUE(it.nudged) << "the thread never read the sunsubscribe (interleaving not forced)";
  EXPECT_EQ(wake, Subscriber::Slot::Wake::nudged);
  std::cout << "the nudged direct reader woke " << took.count() << " ms after it began polling\n";
  EXPECT_LT(took.count(), 1000) << "the waiter was nudged but slept on the socket until the old master answered";
}

}  // namespace
}  // namespace lockon::test
