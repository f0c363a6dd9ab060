// integration/test_shared_faults.cpp — ReadWriteLock and Semaphore under
// faults the primitives' own suites do not attack: a holder process paused
// past its lease and resumed, lost replies and dropped connections around
// acquire / release / cancel (FaultProxy), waiters that time out, and a
// server restarted (empty) under queued waiters.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/token.hpp"
#include "lock/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "shared_lease_support.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class SharedFaults : public ClientTest {
 protected:
  long long holders(const std::string& name) { return raw({"ZCARD", detail::companion_key(name, "sh")}).integer; }
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "sq")}).integer; }
};

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
  std::thread third([&] {
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
  std::atomic<long long> acquired_after_ms{-1};
  Clock::time_point stopped;
  std::atomic<bool> pausing{false};
  std::thread third([&] {
    const Client own(server().url());
    ReadWriteLock lock(own, name, {.ttl = 5s, .wait_poll_interval = 50ms});
    if (lock.try_lock_for(10s)) {
      acquired_after_ms = pausing.load() ? ms_since(stopped) : -2;
      lock.unlock();
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  std::this_thread::sleep_for(hold);
  stopped = Clock::now();
  pausing = true;
  paused.kill(SIGSTOP);
  third.join();
  paused.kill(SIGCONT);
  paused.kill(SIGKILL);
  paused.wait(5s);
  ASSERT_NE(acquired_after_ms.load(), -2) << "the third writer got in before the pause";
  ASSERT_GE(acquired_after_ms.load(), 0) << "the third writer never got the lock";
  std::cout << "third writer behind a paused direct holder (held " << hold.count()
            << " ms more) with one more writer: " << acquired_after_ms.load() << " ms (lease " << kLease.count()
            << " ms)\n";
  EXPECT_LT(acquired_after_ms.load(), kLease.count() * 3 / 2) << "a second lease went to the same paused process";
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

// A reader SIGSTOPped past its TTL: the writer gets in once the share ends;
// the resumed reader sees lost() before any round trip (it never acts on the
// resource: MARKER stays unset) and its release reports LockNotOwned.
TEST_F(SharedFaults, ResumedReaderSeesTheLossAndNeverOverlapsTheWriter) {
  const std::string name = key("rw");
  const std::string marker = key("marker");
  constexpr auto kTtl = 600ms;
  Child reader = spawn(worker_argv("stall_hold", {server().url(), name, "read", std::to_string(kTtl.count()), marker}));
  ASSERT_TRUE(reader.wait_for_output("acquired", 10s)) << reader.stderr_text();
  reader.kill(SIGSTOP);
  const auto stopped = Clock::now();
  ReadWriteLock writer(client(), name, {.ttl = 10s});
  ASSERT_TRUE(writer.try_lock_for(5s)) << "the stopped reader's share never ended";
  const long long took = ms_since(stopped);
  EXPECT_LE(took, kTtl.count() + 300) << "the writer waited past the share's TTL";
  reader.kill(SIGCONT);
  const ProcessResult result = reader.wait(10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_NE(result.out.find("resumed lost=1"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("release=not_owned"), std::string::npos) << result.out;
  EXPECT_TRUE(raw({"GET", marker}).is_nil()) << "the resumed reader acted while the writer held";
  EXPECT_TRUE(writer.held_shared() == false && writer.held());
  EXPECT_FALSE(writer.lost());
  EXPECT_NO_THROW(writer.release());
  EXPECT_EQ(holders(name), 0);
}

// The same for a permit of a one-permit semaphore.
TEST_F(SharedFaults, ResumedPermitHolderSeesTheLoss) {
  const std::string name = key("sem");
  const std::string marker = key("marker");
  constexpr auto kTtl = 600ms;
  Child holder = spawn(worker_argv("stall_hold", {server().url(), name, "permit", std::to_string(kTtl.count()), marker}));
  ASSERT_TRUE(holder.wait_for_output("acquired", 10s)) << holder.stderr_text();
  holder.kill(SIGSTOP);
  const auto stopped = Clock::now();
  Semaphore next(client(), name, 1, {.ttl = 10s});
  ASSERT_TRUE(next.try_acquire_for(5s)) << "the stopped holder's permit never came back";
  EXPECT_LE(ms_since(stopped), kTtl.count() + 300);
  holder.kill(SIGCONT);
  const ProcessResult result = holder.wait(10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_NE(result.out.find("resumed lost=1"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("release=not_owned"), std::string::npos) << result.out;
  EXPECT_TRUE(raw({"GET", marker}).is_nil());
  EXPECT_EQ(holders(name), 1) << "the stale release must not free the new holder's permit";
  EXPECT_FALSE(next.lost());
  next.release_or_throw();
  EXPECT_EQ(holders(name), 0);
}

// Waiters of both sides that time out give their queue places up: the queue
// is empty and a no-wait try gets in as soon as the holder leaves.
TEST_F(SharedFaults, TimedOutWaitersLeaveNoQueueEntry) {
  const std::string name = key("rw");
  ReadWriteLock writer(client(), name, {.ttl = 10s});
  writer.lock();
  ReadWriteLock reader(client(), name), second_writer(client(), name);
  for (int round = 0; round < 3; ++round) {
    EXPECT_FALSE(reader.try_lock_shared_for(60ms));
    EXPECT_FALSE(second_writer.try_lock_for(60ms));
  }
  EXPECT_EQ(queued(name), 0) << "a waiter that gave up left its entry";
  writer.unlock();
  const auto released = Clock::now();
  EXPECT_TRUE(reader.try_lock_shared()) << "a departed waiter blocks newcomers";
  EXPECT_LT(ms_since(released), 100);
  reader.unlock_shared();
  EXPECT_EQ(holders(name), 0);
}

// The server restarts (empty) while a permit is held and two waiters queue:
// every waiter ends in time (a permit or a typed error, never a hang), the
// waiters never overlap, the old holder learns its permit is gone, and
// afterwards the name works with no leaked permit or queue entry.
TEST_F(SharedFaults, RestartUnderQueuedWaitersEndsTypedAndLeaksNothing) {
  const std::string name = key("sem");
  Semaphore holder(client(), name, 1, {.ttl = 1500ms});
  ASSERT_TRUE(holder.try_acquire());
  std::atomic<int> inside{0}, overlaps{0}, acquired{0}, typed_errors{0}, finished{0};
  Crew waiters;
  waiters.run(2, [&](int) {
    const Client own(server().url());
    Semaphore semaphore(own, name, 1, {.ttl = 5s});
    try {
      if (semaphore.try_acquire_for(6s)) {
        if (++inside > 1) ++overlaps;
        std::this_thread::sleep_for(50ms);
        --inside;
        semaphore.release();
        ++acquired;
      }
    } catch (const Error&) {
      ++typed_errors;
    }
    ++finished;
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  const auto restarted = Clock::now();
  server().restart();
  raw_ = std::make_unique<RawConnection>(server().connect());
  EXPECT_TRUE(eventually(2s, [&] { return holder.lost(); })) << "the holder never learned its permit was gone";
  ASSERT_TRUE(eventually(8s, [&] { return finished.load() == 2; })) << "a waiter hung after the restart";
  waiters.join();
  EXPECT_EQ(waiters.errors(), "");
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(acquired.load() + typed_errors.load(), 2);
  std::cout << "after restart: " << acquired.load() << " waiters got in, " << typed_errors.load()
            << " typed errors, " << ms_since(restarted) << " ms\n";
  try {
    holder.release_or_throw();
    ADD_FAILURE() << "the release of a permit the restart erased succeeded";
  } catch (const LockNotOwned&) {
  } catch (const IoError&) {
  }
  Semaphore fresh(client(), name, 1, {.ttl = 5s});
  EXPECT_TRUE(fresh.try_acquire_for(2s)) << "a permit leaked past the restart";
  fresh.release_or_throw();
  EXPECT_EQ(holders(name), 0);
  EXPECT_EQ(queued(name), 0);
}

// The same for a read-write lock: readers hold, a writer and a reader queue
// behind the writer; the server restarts empty. Every waiter ends in time
// (in or a typed error), the readers learn their shares are gone, and the
// name works afterwards with nothing left behind.
TEST_F(SharedFaults, RestartUnderQueuedWriterAndReaderEndsTypedAndLeaksNothing) {
  const std::string name = key("rw");
  ReadWriteLock first(client(), name, {.ttl = 1500ms}), second(client(), name, {.ttl = 1500ms});
  ASSERT_TRUE(first.try_lock_shared());
  ASSERT_TRUE(second.try_lock_shared());
  std::atomic<int> ended{0}, typed_errors{0}, got_in{0};
  Crew waiters;
  waiters.run(2, [&](int i) {
    const Client own(server().url());
    ReadWriteLock lock(own, name, {.ttl = 5s});
    try {
      const bool in = i == 0 ? lock.try_lock_for(6s) : lock.try_lock_shared_for(6s);
      if (in) {
        ++got_in;
        lock.release();
      }
    } catch (const Error&) {
      ++typed_errors;
    }
    ++ended;
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) >= 1; }));
  std::this_thread::sleep_for(50ms);  // the reader queues behind the writer
  server().restart();
  raw_ = std::make_unique<RawConnection>(server().connect());
  EXPECT_TRUE(eventually(2s, [&] { return first.lost() && second.lost(); })) << "a reader kept believing it held";
  ASSERT_TRUE(eventually(8s, [&] { return ended.load() == 2; })) << "a waiter hung after the restart";
  waiters.join();
  EXPECT_EQ(waiters.errors(), "");
  EXPECT_EQ(got_in.load() + typed_errors.load(), 2);
  for (ReadWriteLock* reader : {&first, &second}) {
    try {
      reader->release();
      ADD_FAILURE() << "the release of a share the restart erased succeeded";
    } catch (const LockNotOwned&) {
    } catch (const IoError&) {
    }
  }
  ReadWriteLock fresh(client(), name, {.ttl = 5s});
  EXPECT_TRUE(fresh.try_lock_for(2s)) << "a share leaked past the restart";
  fresh.release();
  EXPECT_EQ(holders(name), 0);
  EXPECT_EQ(queued(name), 0);
}

// A fixture whose clients talk through a FaultProxy.
class SharedProxyFaults : public SharedFaults {
 protected:
  void SetUp() override {
    SharedFaults::SetUp();
    if (HasFatalFailure()) return;
    proxy_ = std::make_unique<FaultProxy>(server().host(), server().port());
    via_proxy_ = std::make_unique<Client>(proxy_->url());
    // Loads the scripts so the faults below hit EVALSHA.
    const std::string warm_name = key("warm");
    Semaphore warm(*via_proxy_, warm_name, 1, {.ttl = 5s});
    ASSERT_TRUE(warm.try_acquire());
    Semaphore warm_waiter(*via_proxy_, warm_name, 1, {.ttl = 5s});
    ASSERT_FALSE(warm_waiter.try_acquire_for(20ms));
    warm.release_or_throw();
  }
  FaultProxy& proxy() { return *proxy_; }
  Client& via_proxy() { return *via_proxy_; }

  std::unique_ptr<FaultProxy> proxy_;
  std::unique_ptr<Client> via_proxy_;
};

// The first attempt runs (and takes the permit) but its reply is lost: the
// call fails typed, and the permit is not kept by nobody (the clean-up
// removes it; at worst its TTL would).
TEST_F(SharedProxyFaults, LostAcquireReplyLeaksNoPermit) {
  const std::string name = key("sem");
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = "-|-|", .action = FaultAction::close_after_forward, .times = 1});
  Semaphore semaphore(via_proxy(), name, 1, {.ttl = 3s});
  EXPECT_THROW(semaphore.acquire(), IoError);
  EXPECT_EQ(proxy().matched(rule), 1u);
  EXPECT_FALSE(semaphore.held());
  EXPECT_TRUE(eventually(500ms, [&] { return holders(name) == 0; })) << "the permit won by a lost reply stayed";
  Semaphore other(client(), name, 1);
  EXPECT_TRUE(other.try_acquire());
  other.release();
}

// The release's reply is lost (it ran and handed the permit to the waiter):
// the holder is told (IoError, lost()), the waiter gets in, and the permit
// count never exceeds 1.
TEST_F(SharedProxyFaults, LostReleaseReplyHandsOverOnce) {
  const std::string name = key("sem");
  Semaphore holder(via_proxy(), name, 1, {.ttl = 5s});
  ASSERT_TRUE(holder.try_acquire());
  std::atomic<bool> waiter_in{false};
  std::thread waiter([&] {
    Semaphore semaphore(client(), name, 1, {.ttl = 5s});
    if (semaphore.try_acquire_for(3s)) {
      waiter_in = true;
      std::this_thread::sleep_for(100ms);
    }
  });
  ASSERT_TRUE(eventually(3s, [&] { return queued(name) == 1; }));
  // "p:" only appears in the release's (and a renewal's, 1.6 s away) member.
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = "p:", .action = FaultAction::close_after_forward, .times = 1});
  EXPECT_THROW(holder.release_or_throw(), IoError);
  EXPECT_EQ(proxy().matched(rule), 1u);
  EXPECT_TRUE(holder.lost());
  EXPECT_TRUE(eventually(1s, [&] { return waiter_in.load(); })) << "the hand-over did not reach the waiter";
  EXPECT_LE(holders(name), 1);
  waiter.join();
  EXPECT_EQ(holders(name), 0);
}

// The release never reaches the server: the permit stays with the departed
// holder only until its TTL, then the waiter gets it (count ≤ 1 throughout).
TEST_F(SharedProxyFaults, UnsentReleaseEndsWithTheTtl) {
  const std::string name = key("sem");
  constexpr auto kTtl = 800ms;
  Semaphore holder(via_proxy(), name, 1, {.ttl = kTtl});
  ASSERT_TRUE(holder.try_acquire());
  std::atomic<long long> waited{-1};
  std::atomic<Clock::time_point> released_at{Clock::time_point::max()};
  std::thread waiter([&] {
    Semaphore semaphore(client(), name, 1, {.ttl = 5s, .wait_poll_interval = 10s});
    if (semaphore.try_acquire_for(4s)) waited = ms_since(released_at.load());
  });
  ASSERT_TRUE(eventually(3s, [&] { return queued(name) == 1; }));
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = "p:", .action = FaultAction::close_before_forward, .times = 1});
  released_at = Clock::now();
  EXPECT_THROW(holder.release_or_throw(), IoError);
  EXPECT_EQ(proxy().matched(rule), 1u);
  long long peak = 0;
  for (int i = 0; i < 200 && waited.load() < 0; ++i) {
    peak = std::max(peak, holders(name));
    std::this_thread::sleep_for(10ms);
  }
  waiter.join();
  EXPECT_LE(peak, 1);
  ASSERT_GE(waited.load(), 0) << "the unreleased permit never came back";
  EXPECT_LE(waited.load(), kTtl.count() + 300);
}


// A waiter times out and its cancel is lost on the wire (a blip at the
// deadline): its entry stays queued. With another waiter of the same
// process listening on the name's wake channel, the next release hands the
// permit to the departed entry (PUBLISH counts a listener). The live waiter
// behind it must still get in promptly, not a whole lease later.
//
// Found failing on 2026-11-23 (the live waiter was not in after 6 s: the
// cancel was tried once, 25 ms, and the departed entry got a share for the
// departed waiter's whole TTL); fixed by retrying the cancel in the
// background like a Lock's abandoned wait (lock/orphans.hpp).
TEST_F(SharedProxyFaults, LostCancelDoesNotStrandThePermit) {
  const std::string name = key("sem");
  Semaphore holder(client(), name, 1, {.ttl = 10s});
  ASSERT_TRUE(holder.try_acquire());
  std::atomic<int> first_result{-1};
  std::thread first([&] {
    Semaphore semaphore(via_proxy(), name, 1, {.ttl = 3s, .wait_poll_interval = 10s});
    try {
      first_result = semaphore.try_acquire_for(400ms) ? 1 : 0;
    } catch (const IoError&) {
      first_result = 2;  // its last attempt was lost: typed, fine
    }
  });
  ASSERT_TRUE(eventually(3s, [&] { return queued(name) == 1; }));
  std::atomic<long long> second_waited{-1};
  std::atomic<Clock::time_point> released_at{Clock::time_point::max()};
  std::thread second([&] {
    Semaphore semaphore(via_proxy(), name, 1, {.ttl = 3s, .wait_poll_interval = 10s});
    if (semaphore.try_acquire_for(6s)) second_waited = ms_since(released_at.load());
  });
  ASSERT_TRUE(eventually(3s, [&] { return queued(name) == 2; }));
  // The first waiter's next scripts are one last attempt at its deadline,
  // then its cancel: both are lost.
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = "|p|", .action = FaultAction::close_before_forward, .times = 2});
  first.join();
  EXPECT_TRUE(first_result.load() == 0 || first_result.load() == 2) << first_result.load();
  EXPECT_EQ(proxy().matched(rule), 2u);
  std::cout << "queue after the lost cancel: " << queued(name) << " entries\n";
  released_at = Clock::now();
  holder.release_or_throw();
  second.join();
  ASSERT_GE(second_waited.load(), 0) << "the second waiter never got in";
  std::cout << "live waiter behind a departed one whose cancel was lost: " << second_waited.load() << " ms\n";
  EXPECT_LT(second_waited.load(), 1000) << "the permit went to the departed waiter for its whole lease";
}

}  // namespace
}  // namespace lockon::test
