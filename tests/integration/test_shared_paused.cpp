// integration/test_shared_paused.cpp — ReadWriteLock liveness when a
// process is paused (SIGSTOP) holding a share or with waiters queued: it
// costs the others one lease, not one per thread it queued (the records
// naming which process holds or was handed a share, and their upkeep).
// The lock's own version: test_lock_paused_waiters.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/token.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "shared_lease_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Starts a third process's waiter (`get_in` on a Client of its own: true if
// it got in, having released at once), waits until the queue holds it
// behind the paused process's queued thread, lets `hold` pass, stops
// `paused` (SIGSTOP), and returns the ms from the pause until the third got
// in: -1 never, -2 before the pause. `paused` is SIGKILLed afterwards.
long long ms_until_a_third_gets_in(Child& paused, const std::string& url, const std::function<long long()>& queued_now,
                                   std::chrono::milliseconds hold, const std::function<bool(const Client&)>& get_in) {
  std::atomic<long long> acquired_after_ms{-1};
  Clock::time_point stopped;
  std::atomic<bool> pausing{false};
  std::thread third([&] {
    const Client own(url);
    if (get_in(own)) acquired_after_ms = pausing.load() ? ms_since(stopped) : -2;
  });
  const bool queued_up = eventually(5s, [&] { return queued_now() == 2; });
  if (queued_up) std::this_thread::sleep_for(hold);
  stopped = Clock::now();
  pausing = true;
  paused.kill(SIGSTOP);
  third.join();
  paused.kill(SIGCONT);
  paused.kill(SIGKILL);
  paused.wait(5s);
  EXPECT_TRUE(queued_up) << "the third waiter never queued behind the paused process";
  return acquired_after_ms.load();
}

// A process paused with two writers queued (the lock's own version of
// this: LockPausedWaiters): the release grants its first writer (its
// subscriber is connected, so the grant counts as heard), which cannot
// use it; when that share lapses, its second writer must not be granted
// another lease; a third process's writer gets in about one lease after
// the release, not two. Also when the two writers queued through two
// Clients (two subscribers): the lapse names the process, not the
// subscriber the hand-over reached.
class SharedPausedWaiters : public SharedFaults, public ::testing::WithParamInterface<bool> {};

TEST_P(SharedPausedWaiters, ProcessWithTwoQueuedWritersCostsOneLeaseNotTwo) {
  const std::string name = key("rw");
  constexpr auto kLease = 600ms;
  ReadWriteLock holder(client(), name, {.ttl = 30s});
  ASSERT_TRUE(holder.try_lock());
  std::vector<std::string> args{server().url(), name, std::to_string(kLease.count()), "2"};
  if (GetParam()) args.push_back("clients");
  Child paused = spawn(worker_argv("rw_wait_threads", args));
  ASSERT_TRUE(eventually(10s, [&] { return queued(name) == 2; })) << paused.stderr_text();
  std::atomic<long long> acquired_after_ms{-1};
  paused.kill(SIGSTOP);
  const auto released = Clock::now();
  std::jthread third([&] {
    const Client own(server().url());
    ReadWriteLock lock(own, name, {.ttl = 5s, .wait_poll_interval = 50ms});
    if (lock.try_lock_for(8s)) {
      acquired_after_ms = ms_since(released);
      lock.unlock();
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 3; }));
  holder.release();  // granted to the paused process's first writer
  third.join();
  paused.kill(SIGCONT);
  paused.kill(SIGKILL);
  paused.wait(5s);
  ASSERT_GE(acquired_after_ms.load(), 0) << "the third writer never got the lock";
  std::cout << "third writer behind a paused process with two writers (" << (GetParam() ? "two Clients" : "one Client")
            << "): " << acquired_after_ms.load()
            << " ms (lease " << kLease.count() << " ms)\n";
  EXPECT_LT(acquired_after_ms.load(), kLease.count() * 3 / 2) << "a second lease went to the same paused process";
}

INSTANTIATE_TEST_SUITE_P(Queued, SharedPausedWaiters, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "ThroughTwoClients" : "ThroughOneClient";
                         });

// A process took the write lock directly (nobody held it: no hand-over,
// so no record of it), with another of its threads queued behind it, and
// is paused, at once or after holding 3 leases (renewed). When its share
// lapses, its queued thread must not be granted another lease: that thread
// named its process's held share as it queued. A third process's writer
// gets in about one lease after the pause, not two.
class SharedPausedDirectHolder : public SharedFaults, public ::testing::WithParamInterface<int> {};

TEST_P(SharedPausedDirectHolder, CostsOneLeaseNotOnePerQueuedThread) {
  const std::string name = key("rw");
  constexpr auto kLease = 600ms;
  const auto hold = kLease * GetParam();
  Child paused = spawn(worker_argv("rw_hold_threads", {server().url(), name, std::to_string(kLease.count()), "2"}));
  ASSERT_TRUE(paused.wait_for_output("acquired", 10s)) << paused.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; })) << paused.stderr_text();
  const long long after_ms = ms_until_a_third_gets_in(
      paused, server().url(), [&] { return queued(name); }, hold, [&](const Client& own) {
        ReadWriteLock lock(own, name, {.ttl = 5s, .wait_poll_interval = 50ms});
        if (!lock.try_lock_for(10s)) return false;
        lock.unlock();
        return true;
      });
  ASSERT_NE(after_ms, -2) << "the third writer got in before the pause";
  ASSERT_GE(after_ms, 0) << "the third writer never got the lock";
  std::cout << "third writer behind a paused direct holder (held " << hold.count()
            << " ms more) with one more writer: " << after_ms << " ms (lease " << kLease.count()
            << " ms)\n";
  EXPECT_LT(after_ms, kLease.count() * 3 / 2) << "a second lease went to the same paused process";
}

// Only a process's own shares are named: a waiter behind another process's
// share records nothing; one behind its own process's share names it, and
// the share's release deletes that.
TEST_F(SharedFaults, AWaiterNamesOnlyItsOwnProcesssShares) {
  const std::string name = key("rw");
  const std::string record = detail::companion_key(name, "shs");
  Child other = spawn(worker_argv("rw_hold_threads", {server().url(), name, "5000", "1"}));
  ASSERT_TRUE(other.wait_for_output("acquired", 10s)) << other.stderr_text();
  ReadWriteLock waiter(client(), name, {.ttl = 5s});
  EXPECT_FALSE(waiter.try_lock_for(200ms));
  EXPECT_EQ(raw({"EXISTS", record}).integer, 0) << "a waiter named another process's share as its own";
  other.kill(SIGKILL);
  other.wait(5s);
  raw({"DEL", detail::companion_key(name, "sh"), detail::companion_key(name, "sq")});

  // Ours: named while held; gone with the release.
  ReadWriteLock reader(client(), name, {.ttl = 5s});
  ASSERT_TRUE(reader.try_lock_shared());
  EXPECT_FALSE(waiter.try_lock_for(1s));  // long enough to queue on a loaded machine
  EXPECT_EQ(raw({"HLEN", record}).integer, 1) << "the waiter did not name its process's share";
  reader.unlock_shared();
  EXPECT_EQ(raw({"EXISTS", record}).integer, 0) << "the release left the record";
}

// The race session 14's CI hit: a thread's share granted directly a moment
// ago, whose thread has not yet returned from its acquire (here: a share
// that no object of this process knows of), when another thread queues.
// The queueing script finds it by its token's process nonce, on the
// server, and names it; another process's share beside it is not named.
TEST_F(SharedFaults, AWaiterNamesItsProcesssShareGrantedAMomentAgo) {
  const std::string name = key("rw");
  const std::string holders = detail::companion_key(name, "sh");
  const std::string record = detail::companion_key(name, "shs");
  const std::string our_nonce(token_nonce(detail::lock_token()));
  const std::string ours = "x:" + detail::random_hex() + "." + our_nonce;
  const std::string theirs = "x:" + detail::random_hex() + "." + detail::random_hex(6);
  const std::string far = "99999999999999";  // no lapse during the test
  raw({"ZADD", holders, far, ours, far, theirs});
  ReadWriteLock waiter(client(), name, {.ttl = 5s});
  EXPECT_FALSE(waiter.try_lock_for(1s));  // queued, then gave up
  const auto named = raw({"HGET", record, ours});
  ASSERT_EQ(named.type, RawReply::Type::string) << "the waiter did not name its process's share";
  EXPECT_EQ(token_nonce(named.str), our_nonce) << "named for a subscriber of another process";
  EXPECT_EQ(raw({"HEXISTS", record, theirs}).integer, 0) << "a waiter named another process's share as its own";
  EXPECT_GT(raw({"PTTL", record}).integer, 0) << "the record never expires";
}

// A share with a caller-chosen token (SharedLeaseLock, LockOptions::token)
// ends in no process nonce, so no queueing lookup can tell it is its
// process's: its grant records it instead. A process holding the only
// permit of a semaphore that way, with another of its threads queued, is
// paused after holding one lease (renewed): a third process's waiter gets
// in about one lease after the pause, not two. The record is in place as
// soon as the permit is granted, and goes with the worker's SIGKILL lapse.
TEST_F(SharedFaults, CustomTokenShareHolderPausedCostsOneLeaseNotOnePerQueuedThread) {
  const std::string name = key("sem");
  const std::string record = detail::companion_key(name, "shs");
  constexpr auto kLease = 600ms;
  Child paused = spawn(worker_argv("sem_custom_hold_threads", {server().url(), name, std::to_string(kLease.count()), "2"}));
  ASSERT_TRUE(paused.wait_for_output("acquired", 10s)) << paused.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; })) << paused.stderr_text();
  const RawReply holders = raw({"ZRANGE", detail::companion_key(name, "sh"), "0", "-1"});
  ASSERT_EQ(holders.elements.size(), 1u);
  ASSERT_EQ(holders.elements[0].str.rfind("p:custom-", 0), 0u) << holders.elements[0].str;
  const RawReply named = raw({"HGET", record, holders.elements[0].str});
  ASSERT_EQ(named.type, RawReply::Type::string) << "the custom-token grant was not recorded as its process's";
  // Under the worker's own process id, the nonce its queued entry's subscriber id ends in.
  const RawReply queue = raw({"LRANGE", detail::companion_key(name, "sq"), "0", "-1"});
  ASSERT_EQ(queue.elements.size(), 1u);
  const std::string entry_sid = queue.elements[0].str.substr(0, queue.elements[0].str.find('|'));
  EXPECT_EQ(named.str.rfind("-.", 0), 0u) << named.str;
  EXPECT_EQ(token_nonce(named.str), token_nonce(entry_sid)) << named.str << " / " << entry_sid;
  const long long after_ms = ms_until_a_third_gets_in(
      paused, server().url(), [&] { return queued(name); }, kLease, [&](const Client& own) {
        Semaphore semaphore(own, name, 1, {.ttl = 5s, .wait_poll_interval = 50ms});
        if (!semaphore.try_acquire_for(10s)) return false;
        semaphore.release();
        return true;
      });
  ASSERT_NE(after_ms, -2) << "the third waiter got in before the pause";
  ASSERT_GE(after_ms, 0) << "the third waiter never got a permit";
  std::cout << "third waiter behind a paused custom-token permit holder with one more waiter: "
            << after_ms << " ms (lease " << kLease.count() << " ms)\n";
  EXPECT_LT(after_ms, kLease.count() * 3 / 2) << "a second lease went to the same paused process";
}

INSTANTIATE_TEST_SUITE_P(HeldFor, SharedPausedDirectHolder, ::testing::Values(0, 3),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "Leases" + std::to_string(param.param);
                         });

// The record of a share granted by hand-over (which process got it) lives
// as long as the share does, renewed with it, and goes with its release.
TEST_F(SharedFaults, RenewalsKeepTheRecordOfAHandedShareAndReleaseDeletesIt) {
  const std::string name = key("rw");
  const std::string record = detail::companion_key(name, "shs");
  constexpr auto kLease = 300ms;
  ReadWriteLock holder(client(), name, {.ttl = 30s});
  ASSERT_TRUE(holder.try_lock());
  const Client own(server().url());
  ReadWriteLock waiter(own, name, {.ttl = kLease});
  std::atomic<bool> granted{false};
  std::thread waiting([&] { granted = waiter.try_lock_for(5s); });
  const bool queued_up = eventually(5s, [&] { return queued(name) == 1; });
  holder.release();
  waiting.join();
  ASSERT_TRUE(queued_up);
  ASSERT_TRUE(granted.load());
  EXPECT_EQ(raw({"HLEN", record}).integer, 1) << "a hand-over wrote no record";
  std::this_thread::sleep_for(kLease * 3);  // past the record's own 2 x ttl
  EXPECT_FALSE(waiter.lost());
  EXPECT_EQ(raw({"HLEN", record}).integer, 1) << "the record lapsed while the share was renewed";
  waiter.release();
  EXPECT_EQ(raw({"EXISTS", record}).integer, 0) << "the release left the record behind";
}

}  // namespace
}  // namespace lockon::test
