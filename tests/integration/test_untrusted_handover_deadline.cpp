// integration/test_untrusted_handover_deadline.cpp — a hand-over message a
// waiter may not trust, arriving as its deadline passes, with
// LockOptions::keep_queue_place (lock_on's retry windows use it).
//
// A message is proof of a grant only if it came over the subscriber
// connection that was up when the waiter sent its last attempt
// (lock/wake_proof.hpp). When it is no proof and the deadline has passed,
// nothing more may be sent but the cancel, and give_up() must still see the
// mark: its cancel passes K on if K holds our token (the hand-over was real,
// only unproven). Clearing the mark first (as lock_wait.cpp did before
// 35004cd) sent give_up() down the keep_queue_place branch: the place was
// kept and K with it, holding a token its owner had just said it does not
// have, while the next waiter sat behind it until that owner tried again,
// gave up the place, or K's TTL ran out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "common/test_hooks.hpp"
#include "protocol/lock_scripts.hpp"
#include "lock/subscriber.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Subscriber;

// The waiter the test holds still, between its look at its slot and its bid
// to read the socket (detail::test_hooks::before_direct_read): a thread
// descheduled there while its wake-up arrives, made deterministic. A plain
// function pointer captures nothing, hence the globals.
thread_local bool is_stalled_waiter = false;
std::atomic<bool> stall_armed{false};
std::atomic<Subscriber::Slot*> stalled_slot{nullptr};
std::atomic<bool> resume_stalled{false};

void stall_once(Subscriber::Slot& slot) {
  if (!is_stalled_waiter || !stall_armed.exchange(false)) return;
  stalled_slot = &slot;
  const auto until = Clock::now() + 30s;  // a failing test must not hang
  while (!resume_stalled && Clock::now() < until) std::this_thread::sleep_for(1ms);
}

bool slot_handed(Subscriber::Slot& slot) {
  std::lock_guard lock(slot.mutex);
  return slot.handed;
}

// Ids of the server's pub/sub clients (CLIENT LIST TYPE pubsub).
std::set<std::string> pubsub_client_ids(RedisServer& server) {
  const std::string list = server.command({"CLIENT", "LIST", "TYPE", "pubsub"}).str;
  std::set<std::string> ids;
  const std::regex id_field(R"((?:^|\n)id=(\d+) )");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), id_field); it != std::sregex_iterator(); ++it)
    ids.insert((*it)[1].str());
  return ids;
}

class UntrustedHandOverAtDeadline : public RedisTest {
 protected:
  void TearDown() override {
    detail::test_hooks::before_direct_read = nullptr;
    stall_armed = false;
    stalled_slot = nullptr;
    resume_stalled = false;
  }
};

// Attacks: "an untrusted hand-over at the deadline stays marked for
// give_up, whose cancel passes K on" (lock_wait.cpp, 35004cd). B (a Lock
// with keep_queue_place, try_lock_for 1.5 s) queues behind H and is held
// still in its wait; its subscriber's connection is killed and comes back
// (a new connection: B's last attempt did not hear over it); H releases and
// hands K to B, whose wake-up arrives over the new connection; B resumes
// after its deadline, so the message is no proof and only the cancel may be
// sent. C, queued behind B, must get K at once: B said it does not hold K.
//
// Fails without the fix (`if (handed) reset_slot();` moved back above the
// deadline check): B kept its place and K held B's token (TTL 30 s); C,
// polling every 250 ms, never got K in its 6 s ("C got K -1 ms after B gave
// up", and GET K still returned B's token after C gave up).
TEST_F(UntrustedHandOverAtDeadline, KeptQueuePlacePassesTheLockOnToTheNextWaiter) {
  const std::string name = key("untrusted-deadline");
  const std::string queue = detail::companion_key(name, "q");
  const std::string b_token = "b-token-" + name;

  Client holder_client(server().url());
  Lock holder(holder_client, name, LockOptions{.ttl = 30s});
  ASSERT_TRUE(holder.try_lock());

  // B and C share one Client, so one subscriber: with two waiters its
  // thread reads the socket for both, and so dispatches B's wake-up while B
  // is held still (a lone waiter would read it only itself).
  Client waiters(server().url());
  is_stalled_waiter = false;
  stall_armed = true;
  detail::test_hooks::before_direct_read = &stall_once;

  constexpr auto kBWait = 1500ms;
  std::atomic<long long> b_started_ns{0};
  std::atomic<int> b_result{-1};
  std::atomic<long long> b_gave_up_ns{0};
  std::atomic<bool> b_may_leave{false};
  std::thread b_thread([&] {
    is_stalled_waiter = true;
    LockOptions options;
    options.ttl = 30s;
    options.keep_queue_place = true;
    options.token = b_token;
    Lock b(waiters, name, options);
    b_started_ns = Clock::now().time_since_epoch().count();
    const bool got = b.try_lock_for(kBWait);
    b_gave_up_ns = Clock::now().time_since_epoch().count();
    b_result = got ? 1 : 0;
    // B stays alive, not waiting: destroying it would give the kept place
    // up (abandon_wait) and pass K on, whatever give_up() did.
    while (!b_may_leave) std::this_thread::sleep_for(5ms);
    if (got) b.unlock();
  });
  struct JoinB {
    std::thread& thread;
    std::atomic<bool>& may_leave;
    ~JoinB() {
      resume_stalled = true;
      may_leave = true;
      thread.join();
    }
  } join_b{b_thread, b_may_leave};

  ASSERT_TRUE(eventually(5s, [&] { return stalled_slot.load() != nullptr; })) << "B never waited";
  ASSERT_EQ(server().command({"LLEN", queue}).integer, 1) << "B is not queued";

  std::atomic<long long> c_got_ns{-1};
  std::atomic<bool> c_done{false};
  std::thread c_thread([&] {
    Lock c(waiters, name, LockOptions{.ttl = 30s});
    if (c.try_lock_for(6s)) {
      c_got_ns = Clock::now().time_since_epoch().count();
      c.unlock();
    }
    c_done = true;
  });
  struct JoinC {
    std::thread& thread;
    ~JoinC() { thread.join(); }
  } join_c{c_thread};
  ASSERT_TRUE(eventually(5s, [&] { return server().command({"LLEN", queue}).integer == 2; })) << "C did not queue";

  // The subscriber's connection dies and comes back: a new generation, with
  // B's channel subscribed again (the release must count B as listening).
  const std::set<std::string> before = pubsub_client_ids(server());
  ASSERT_FALSE(before.empty());
  ASSERT_GE(server().command({"CLIENT", "KILL", "TYPE", "pubsub"}).integer, 1);
  const std::string pattern = detail::companion_key(name, "wake:*");
  ASSERT_TRUE(eventually(5s, [&] {
    const std::set<std::string> now = pubsub_client_ids(server());
    bool fresh = false;
    for (const std::string& id : now) fresh = fresh || !before.contains(id);
    return fresh && !server().command({"PUBSUB", "CHANNELS", pattern}).elements.empty();
  })) << "the subscriber did not come back";

  // H hands K to B (head of the queue); the wake-up reaches B's slot.
  holder.unlock();
  ASSERT_EQ(server().command({"GET", name}).str, b_token) << "the release did not hand K to B";
  Subscriber::Slot& b_slot = *stalled_slot.load();
  ASSERT_TRUE(eventually(3s, [&] { return slot_handed(b_slot); })) << "B's wake-up was not dispatched";

  // B resumes after its deadline: the hand-over it sees is no proof.
  const auto b_deadline = Clock::time_point(Clock::duration(b_started_ns.load())) + kBWait;
  std::this_thread::sleep_until(b_deadline + 100ms);
  resume_stalled = true;
  ASSERT_TRUE(eventually(3s, [&] { return b_result.load() >= 0; })) << "B did not return";
  EXPECT_EQ(b_result.load(), 0) << "B took an unproven hand-over after its deadline";

  ASSERT_TRUE(eventually(8s, [&] { return c_done.load(); }));
  const long long c_after_ms =
      c_got_ns.load() < 0 ? -1 : (c_got_ns.load() - b_gave_up_ns.load()) / 1'000'000;
  const RawReply k_after = server().command({"GET", name});
  std::printf("[untrusted-deadline] C got K %lld ms after B gave up; K now '%s'\n", c_after_ms,
              k_after.str.c_str());
  EXPECT_GE(c_after_ms, 0) << "C never got K: B's kept place kept K (GET K = '" << k_after.str << "')";
  EXPECT_LT(c_after_ms, 1000) << "K was not passed on promptly";
}

}  // namespace
}  // namespace lockon::test
