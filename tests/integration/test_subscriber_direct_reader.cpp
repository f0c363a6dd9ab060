// integration/test_subscriber_direct_reader.cpp — the hand-off between the
// subscriber's thread and a waiter that reads the socket itself (the
// process's lone waiter, lock/subscriber.hpp). A wake-up the thread
// dispatched just before the waiter took over the socket must not be lost:
// that lost wake-up made SharedOnCluster.WriterHandsOverToQueuedReaders…
// flaky (one of two readers of one process sat out its whole deadline).
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/test_hooks.hpp"
#include "protocol/lock_scripts.hpp"
#include "lock/subscriber.hpp"
#include "lockon/options.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Subscriber;

class SubscriberDirectReader : public RedisTest {};

// What the hook needs (a function pointer captures nothing).
struct HandOffInterleaving {
  RedisServer* server = nullptr;
  std::string channel;
  std::optional<Subscriber::Watch>* other = nullptr;
  bool ran = false;
  bool dispatched = false;
};
HandOffInterleaving* hand_off_interleaving = nullptr;

// Runs in the waiter after it found its slot empty, before it bids to read
// directly: the thread (still reading for two waiters) dispatches our
// hand-over, then the other waiter leaves, so we become the lone waiter on
// a live subscription whose socket will stay silent.
void hand_over_then_leave(Subscriber::Slot& slot) {
  HandOffInterleaving& it = *hand_off_interleaving;
  if (it.ran) return;
  it.ran = true;
  it.server->command({"PUBLISH", it.channel, "b 7"});
  const auto until = Clock::now() + 5s;
  while (Clock::now() < until && !it.dispatched) {
    {
      std::lock_guard lock(slot.mutex);
      it.dispatched = slot.handed;
    }
    if (!it.dispatched) std::this_thread::sleep_for(1ms);
  }
  it.other->reset();
}

TEST_F(SubscriberDirectReader, HandOffDispatchedJustBeforeTheWaiterTakesTheSocketWakesIt) {
  Subscriber subscriber(ConnectionOptions::from_url(server().url()));
  const std::string channel = detail::wake_channel(key("direct-reader"), subscriber.id());
  std::optional<Subscriber::Watch> a(subscriber.watch("a", channel));
  Subscriber::Watch b = subscriber.watch("b", channel);
  ASSERT_TRUE(b.wait_subscribed(Clock::now() + 5s));
  HandOffInterleaving it{&server(), channel, &a};
  hand_off_interleaving = &it;
  detail::test_hooks::before_direct_read = &hand_over_then_leave;
  const auto start = Clock::now();
  const Subscriber::Slot::Wake wake = b.wait_until(start + 3s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  detail::test_hooks::before_direct_read = nullptr;
  hand_off_interleaving = nullptr;
  ASSERT_TRUE(it.ran);
  ASSERT_TRUE(it.dispatched) << "the thread never dispatched the hand-over (interleaving not forced)";
  EXPECT_EQ(wake, Subscriber::Slot::Wake::handed);
  EXPECT_EQ(b.slot().fence, 7u);
  EXPECT_LT(took.count(), 1000) << "the hand-over was dispatched but the waiter slept until its deadline";
}

}  // namespace
}  // namespace lockon::test
