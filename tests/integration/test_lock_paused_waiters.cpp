// integration/test_lock_paused_waiters.cpp — a process paused with several
// waiters queued on one key holds it one lease, not one per waiter
// (found by scripts/verify.sh --seed 29; lock_scripts.cpp, drop_lapsed).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/steady_time.hpp"
#include "support/worker_registry.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockPausedWaiters : public ClientTest {
 protected:
  long long queue_length(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "q")}).integer; }

  // Pauses `paused` (SIGSTOP) and returns how long after that the third
  // waiter got the lock, in ms (-1: never), once it has finished; then
  // resumes and kills `paused`.
  static long long pause_and_time(Child& paused, std::jthread& waiter, const std::atomic<long long>& acquired_ns) {
    paused.kill(SIGSTOP);
    const auto stopped = Clock::now();
    waiter.join();
    paused.kill(SIGCONT);
    paused.kill(SIGKILL);
    paused.wait(5s);
    return acquired_ns.load() == 0 ? -1 : (acquired_ns.load() - ns_of(stopped)) / 1'000'000;
  }

  // Pauses the process holding the key (pause_and_time) and expects the
  // third waiter to get it within one `lease`, not two; prints
  // how long it took, after `scenario`.
  static void expect_one_lease_after_pause(Child& paused, std::jthread& waiter,
                                           const std::atomic<long long>& acquired_ns, std::chrono::milliseconds lease,
                                           const std::string& scenario) {
    const long long took_ms = pause_and_time(paused, waiter, acquired_ns);
    ASSERT_GE(took_ms, 0) << "the third waiter never got the lock";
    std::cout << "third waiter behind " << scenario << ": " << took_ms << " ms (lease " << lease.count() << " ms)\n";
    EXPECT_LT(took_ms, lease.count() * 3 / 2) << "a second lease went to the same paused process";
  }

  // Another process's waiter (its own Client), polling every 50 ms: sets
  // `acquired_ns` to the moment it got the lock (0: never).
  std::jthread third_waiter(const std::string& name, std::atomic<long long>& acquired_ns, std::chrono::seconds timeout) {
    return std::jthread([this, name, &acquired_ns, timeout] {
      const Client own(server().url());
      Lock lock(own, name, {.ttl = 5s, .wait_poll_interval = 50ms});
      if (lock.try_lock_for(timeout)) {
        acquired_ns = ns_of(Clock::now());
        lock.unlock();
      }
    });
  }
};

// A paused process with two waiters queued: the release hands the key to
// its first waiter (its subscriber connection is open, so the hand-over
// counts as heard), which cannot take it; when that lease lapses, the next
// waiter must not hand it to the same paused process's second waiter for
// another lease (found by scripts/verify.sh --seed 29: a 6 s gap, one lease
// per waiter of the paused process). Its other entries are dropped (they
// queue again when it runs), so a third process's waiter gets the key
// about one lease after the release, not two. Also when the two waiters
// queued through two Clients (two subscribers): the lapse names the
// process, not only the subscriber the hand-over reached.
class LockPausedTwoWaiters : public LockPausedWaiters, public ::testing::WithParamInterface<bool> {};

TEST_P(LockPausedTwoWaiters, PausedProcessCostsOneLeaseNotTwo) {
  const std::string name = key("lock");
  constexpr auto kLease = 800ms;
  Lock holder(client(), name, {.ttl = 30s, .wait_poll_interval = 60s});
  ASSERT_TRUE(holder.try_lock());
  std::vector<std::string> args{server().url(), name, "800", "2", "20000"};
  if (GetParam()) args.push_back("clients");
  Child paused = spawn(worker_argv("wait_acquire_threads", args));
  ASSERT_TRUE(eventually(10s, [&] { return queue_length(name) == 2; })) << paused.stderr_text();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter = third_waiter(name, acquired_ns, 8s);
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 3; }));
  paused.kill(SIGSTOP);
  const auto released = Clock::now();
  holder.release();  // handed to the paused process's first waiter
  waiter.join();
  paused.kill(SIGCONT);
  ASSERT_NE(acquired_ns.load(), 0) << "the third waiter never got the lock";
  const long long took_ms = (acquired_ns.load() - ns_of(released)) / 1'000'000;
  std::cout << "third waiter behind a paused process with two waiters (" << (GetParam() ? "two Clients" : "one Client")
            << "): " << took_ms << " ms (lease "
            << kLease.count() << " ms)\n";
  EXPECT_GE(took_ms, kLease.count() - 50) << "the paused waiter's lease was cut short";
  EXPECT_LT(took_ms, kLease.count() * 3 / 2) << "a second lease went to the same paused process";
  paused.kill(SIGKILL);
  paused.wait(5s);
}

INSTANTIATE_TEST_SUITE_P(Queued, LockPausedTwoWaiters, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "ThroughTwoClients" : "ThroughOneClient";
                         });

// The same after a long hold: a process handed the key keeps it, renewed,
// for longer than the hand-over's record of it lives (2 x ttl), with
// another of its threads queued behind it; then it is paused. Its lease
// lapses; the next waiter must not hand the key to the paused process's
// queued thread for another lease. The renewals keep that record alive
// while they name the renewer's process.
TEST_F(LockPausedWaiters, PausedHolderAfterALongHoldCostsOneLeaseNotTwo) {
  const std::string name = key("lock");
  constexpr auto kLease = 400ms;
  Lock holder(client(), name, {.ttl = 30s, .wait_poll_interval = 60s});
  ASSERT_TRUE(holder.try_lock());
  Child paused = spawn(worker_argv("wait_hold_threads", {server().url(), name, "400", "2"}));
  ASSERT_TRUE(eventually(10s, [&] { return queue_length(name) == 2; })) << paused.stderr_text();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter = third_waiter(name, acquired_ns, 10s);
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 3; }));
  holder.release();  // handed to the worker's first thread, which holds it
  ASSERT_TRUE(paused.wait_for_output("acquired", 5s)) << paused.stderr_text();
  std::this_thread::sleep_for(kLease * 3);  // past the hand-over record's 2 x ttl
  EXPECT_FALSE(raw({"GET", detail::companion_key(name, "hs")}).is_nil())
      << "the record of the hand-over to the holding process lapsed while it held the key";
  expect_one_lease_after_pause(paused, waiter, acquired_ns, kLease,
                               "a paused holder (held " + std::to_string((kLease * 3).count()) + " ms) with one more waiter");
}

// The same when the holder extended its lease by hand (no renewals) past
// the hand-over record's 2 x ttl: the extension keeps that record alive
// one ttl past the longer lease, as renewals do.
TEST_F(LockPausedWaiters, PausedHolderAfterAnExtendCostsOneLeaseNotTwo) {
  const std::string name = key("lock");
  constexpr auto kLease = 400ms;
  constexpr auto kExtension = kLease * 3;
  Lock holder(client(), name, {.ttl = 30s, .wait_poll_interval = 60s});
  ASSERT_TRUE(holder.try_lock());
  Child paused = spawn(worker_argv("wait_extend_threads", {server().url(), name, "400", "2",
                                                           std::to_string(kExtension.count())}));
  ASSERT_TRUE(eventually(10s, [&] { return queue_length(name) == 2; })) << paused.stderr_text();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter = third_waiter(name, acquired_ns, 10s);
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 3; }));
  holder.release();  // handed to the worker's first thread: lease 400 ms + 1,200 ms extension
  ASSERT_TRUE(paused.wait_for_output("acquired", 5s)) << paused.stderr_text();
  std::this_thread::sleep_for(kExtension);  // past the hand-over record's 2 x ttl; about one ttl of the lease left
  EXPECT_FALSE(raw({"GET", detail::companion_key(name, "hs")}).is_nil())
      << "the record of the hand-over to the holding process lapsed before its extended lease";
  expect_one_lease_after_pause(paused, waiter, acquired_ns, kLease,
                               "a paused holder that extended its lease (about one lease left), with one more waiter");
}

// The record naming a process to drop is written only for a holder of the
// waiter's own process: a waiter behind another process's holder (which
// wrote no holder record) must not name itself from the record its own
// failed fast path left for a moment.
TEST_F(LockPausedWaiters, AWaiterBehindAnotherProcessNamesNoProcess) {
  const std::string name = key("lock");
  ASSERT_TRUE(raw({"SET", name, "someone-else", "PX", "60000"}).is("OK"));
  Lock waiter(client(), name, {.ttl = 5s});
  EXPECT_FALSE(waiter.try_lock_for(200ms));
  EXPECT_TRUE(raw({"GET", detail::companion_key(name, "hs")}).is_nil())
      << "a waiter named its own process as the holder's: " << raw({"GET", detail::companion_key(name, "hs")}).str;
}

// The token alone (holder records off) names the waiter's process only
// when the holder's token ends in this process's nonce: another process's
// token (another nonce) names nobody; a token with ours does.
TEST_F(LockPausedWaiters, TheTokensNonceNamesTheWaitersProcessOnlyWhenItIsOurs) {
  const std::string name = key("lock");
  const std::string hs = detail::companion_key(name, "hs");
  std::string ours;
  {
    Lock probe(client(), name, {.ttl = 5s, .holder_record = false});
    ASSERT_TRUE(probe.try_lock());
    ours = raw({"GET", name}).str;
    probe.unlock();
  }
  ASSERT_TRUE(is_lock_token(ours)) << ours;
  std::string foreign = ours;
  foreign.front() = foreign.front() == 'a' ? 'b' : 'a';
  foreign.back() = foreign.back() == '0' ? '1' : '0';  // another process's nonce
  ASSERT_TRUE(raw({"SET", name, foreign, "PX", "60000"}).is("OK"));
  Lock waiter(client(), name, {.ttl = 5s, .holder_record = false});
  EXPECT_FALSE(waiter.try_lock_for(200ms));
  EXPECT_TRUE(raw({"GET", hs}).is_nil()) << "a waiter named its process behind another process's holder";

  std::string same_process = ours;
  same_process.front() = same_process.front() == 'a' ? 'b' : 'a';  // another acquisition of ours
  ASSERT_TRUE(raw({"SET", name, same_process, "PX", "60000"}).is("OK"));
  EXPECT_FALSE(waiter.try_lock_for(200ms));
  const RawReply named = raw({"GET", hs});
  EXPECT_FALSE(named.is_nil()) << "a waiter behind a holder of its own process did not name its process";
  const long long record_ttl = raw({"PTTL", hs}).integer;
  EXPECT_GT(record_ttl, 60'000) << "the record must outlive the holder's lease by one of the waiter's ttls";
  EXPECT_LE(record_ttl, 65'000);
  raw({"DEL", name, hs});
}

// The same when the holder and its process's waiter use two Clients (two
// subscriber ids): the waiter names its own subscriber as it queues, and
// the holder's renewals keep that record because it names their process
// (subscriber ids end in the process nonce), so after 3 leases and a pause
// the next process's waiter still gets the key after one lease, not two.
TEST_F(LockPausedWaiters, PausedHolderWithItsWaiterOnAnotherClientCostsOneLease) {
  const std::string name = key("lock");
  constexpr auto kLease = 400ms;
  Child paused = spawn(worker_argv("hold_and_wait_two_clients", {server().url(), name, "400"}));
  ASSERT_TRUE(paused.wait_for_output("acquired", 10s)) << paused.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 1; })) << paused.stderr_text();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter = third_waiter(name, acquired_ns, 10s);
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 2; }));
  std::this_thread::sleep_for(kLease * 3);  // past the waiter's own record's expiry (lease + one ttl)
  EXPECT_FALSE(raw({"GET", detail::companion_key(name, "hs")}).is_nil())
      << "the record naming the holder's process lapsed while it held the key";
  expect_one_lease_after_pause(paused, waiter, acquired_ns, kLease, "a paused holder whose waiter uses another Client");
}

// A holder that took the key directly (no hand-over: nobody held it),
// with another thread of its process queued behind it, is paused: the
// queued thread names its process as it queues (the holder's random token
// ends in its process's nonce, and the holder record says the same), so
// when the lease lapses that thread's entry is dropped and the next
// process's waiter gets the key after one lease, not two. Paused at once,
// and after holding 3 leases (the renewals keep that record); with holder
// records and without (the token alone tells).
class LockPausedDirectHolder : public LockPausedWaiters,
                               public ::testing::WithParamInterface<std::tuple<int, bool>> {};

TEST_P(LockPausedDirectHolder, CostsOneLeaseNotOnePerQueuedThread) {
  const std::string name = key("lock");
  constexpr auto kLease = 400ms;
  const auto hold = kLease * std::get<0>(GetParam());
  std::vector<std::string> args{server().url(), name, "400", "2"};
  if (!std::get<1>(GetParam())) args.emplace_back("norecord");
  Child paused = spawn(worker_argv("wait_hold_threads", args));
  ASSERT_TRUE(paused.wait_for_output("acquired", 10s)) << paused.stderr_text();
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 1; })) << paused.stderr_text();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter = third_waiter(name, acquired_ns, 10s);
  ASSERT_TRUE(eventually(5s, [&] { return queue_length(name) == 2; }));
  std::this_thread::sleep_for(hold);
  expect_one_lease_after_pause(paused, waiter, acquired_ns, kLease,
                               "a paused direct holder (held " + std::to_string(hold.count()) + " ms more) with one more waiter");
}

INSTANTIATE_TEST_SUITE_P(HeldFor, LockPausedDirectHolder, ::testing::Combine(::testing::Values(0, 3), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& param) {
                           return "Leases" + std::to_string(std::get<0>(param.param)) +
                                  (std::get<1>(param.param) ? "" : "NoHolderRecord");
                         });

}  // namespace
}  // namespace lockon::test
