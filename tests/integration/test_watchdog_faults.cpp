// The renewal threads under faults: callbacks that unlock other locks, a
// server that stops answering, and fork().
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class WatchdogFaults : public ClientTest {};

// on_lost of one lock unlocks another lock lost in the same renewal round.
// The renewal thread used to run callbacks while holding every due entry's
// mutex: it deadlocked on the second lock's, and renewed nothing ever after.
TEST_F(WatchdogFaults, OnLostThatUnlocksAnotherLockOfTheSameRoundDoesNotStopRenewals) {
  RedisServer own;
  FaultProxy proxy(own.host(), own.port());
  const Client client(proxy.url());
  // A renewal round that takes 400 ms (its command is delayed) makes the
  // next round find both locks below due together.
  Lock slow(client, key("slow"), {.ttl = 600ms});
  ASSERT_TRUE(slow.try_lock());
  proxy.add_rule({.command = "EVALSHA", .argument_contains = slow.name(), .action = FaultAction::delay,
                  .delay = 400ms, .times = 1});
  std::atomic<bool> callback_returned{false};
  auto second = std::make_unique<Lock>(client, key("second"), LockOptions{.ttl = 600ms});
  Lock first(client, key("first"), {.ttl = 600ms, .on_lost = [&](const LossEvent&) {
                                      second->unlock();
                                      callback_returned = true;
                                    }});
  ASSERT_TRUE(first.try_lock());
  ASSERT_TRUE(second->try_lock());
  // Both keys vanish: one renewal round finds both lost.
  ASSERT_EQ(own.command({"DEL", first.name(), second->name()}).integer, 2);
  ASSERT_TRUE(eventually(3s, [&] { return callback_returned.load(); })) << "on_lost never returned (deadlock)";
  // The renewal thread still works for a lock taken afterwards.
  Lock third(client, key("third"), {.ttl = 600ms});
  ASSERT_TRUE(third.try_lock());
  std::this_thread::sleep_for(1500ms);  // 2.5 leases: only renewals keep it
  EXPECT_TRUE(third.owned()) << "renewals stopped after the callback";
  EXPECT_FALSE(third.lost());
  third.unlock();
  slow.unlock();
  first.unlock();
  second.reset();
}

// A server that stops answering must not delay renewals or unlocks of
// locks on another server.
TEST_F(WatchdogFaults, AStalledServerDoesNotDelayRenewalsOrUnlocksOnAnother) {
  RedisServer stalled_server;
  const Client stalled(stalled_server.url() + "?socket_timeout=1s");
  // Due for renewal at +300 ms; from then on every renewal round of its
  // server blocks for the socket timeout.
  Lock on_stalled(stalled, key("a"), {.ttl = 900ms});
  ASSERT_TRUE(on_stalled.try_lock());
  Lock healthy_lock(client(), key("b"), {.ttl = 600ms});
  ASSERT_TRUE(healthy_lock.try_lock());
  stalled_server.pause();
  std::this_thread::sleep_for(1500ms);  // 2.5 of the healthy lock's leases
  EXPECT_FALSE(healthy_lock.lost()) << "the healthy server's lease lapsed behind the stalled one";
  EXPECT_TRUE(healthy_lock.owned());
  const auto start = Clock::now();
  healthy_lock.unlock();
  EXPECT_LT(ms_since(start), 100) << "unlock on a healthy server waited behind the stalled one";
  EXPECT_EQ(healthy_lock.last_unlock_error(), nullptr);
  stalled_server.resume();
  on_stalled.unlock();
}

// A child forked while the parent holds a renewed lock gets working,
// independent lockon state through the parent's Client and RedisLocker: its
// own leases are renewed, replies are its own, and the parent's lock is
// neither held nor released by it.
TEST_F(WatchdogFaults, ForkedChildLocksThroughTheParentsClientAndLocker) {
  RedisServer own;
  const Client client(own.url());
  RedisLocker locker(client, {.max_retry = 1, .ttl = 600ms, .key_prefix = key("p")});
  const auto counted = locker.lock_on<0>("counted", [](LockContext& context, int x) {
    std::this_thread::sleep_for(900ms);  // past the ttl: renewal must keep it
    return context.lost() ? -1 : x;
  });
  EXPECT_EQ(counted(1), 1);  // the locker and client are warm in the parent
  Lock parents(client, key("parent"), {.ttl = 600ms});
  ASSERT_TRUE(parents.try_lock());
  // The parent keeps using the same Client from a thread while the child runs.
  std::atomic<bool> stop{false};
  std::atomic<int> parent_errors{0};
  std::jthread parent_traffic([&] {
    while (!stop) {
      try {
        if (client.command({"ECHO", "parent"}).as_string() != "parent") ++parent_errors;
      } catch (const Error&) {
        ++parent_errors;
      }
    }
  });
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      if (parents.held()) code |= 1;             // the parent's lock is not the child's
      Lock own_lock(client, key("child"), {.ttl = 600ms});
      if (!own_lock.try_lock()) code |= 2;
      std::this_thread::sleep_for(1200ms);        // two leases: only renewals keep it
      if (!own_lock.owned() || own_lock.lost()) code |= 4;
      own_lock.unlock();
      if (counted(2) != 2) code |= 8;             // lock_on through the parent's locker
      for (int i = 0; i < 200; ++i)
        if (client.command({"ECHO", "child"}).as_string() != "child") code |= 16;
      parents.unlock();                           // a no-op in the child
    } catch (...) {
      code |= 32;
    }
    ::_exit(code);
  }
  int status = -1;
  const auto deadline = Clock::now() + 15s;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(child, &status, WNOHANG)) == 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  if (reaped == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  stop = true;
  parent_traffic.join();
  ASSERT_NE(reaped, 0) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "child status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failures (bit mask): " << WEXITSTATUS(status);
  EXPECT_EQ(parent_errors.load(), 0);
  EXPECT_TRUE(parents.owned()) << "the child's exit released or disturbed the parent's lock";
  EXPECT_FALSE(parents.lost());
  parents.unlock();
  EXPECT_EQ(parents.last_unlock_error(), nullptr);
}

}  // namespace
}  // namespace lockon::test
