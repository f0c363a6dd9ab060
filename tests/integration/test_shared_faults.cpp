// integration/test_shared_faults.cpp — ReadWriteLock and Semaphore under
// faults the primitives' own suites do not attack: a holder process paused
// past its lease and resumed, lost replies and dropped connections around
// acquire / release / cancel (FaultProxy), waiters that time out, and a
// server restarted (empty) under queued waiters. What a paused process
// costs the other waiters: test_shared_paused.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
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
  std::jthread waiter([&] {
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
  std::jthread waiter([&] {
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
  std::jthread first([&] {
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
  std::jthread second([&] {
    Semaphore semaphore(via_proxy(), name, 1, {.ttl = 3s, .wait_poll_interval = 10s});
    if (semaphore.try_acquire_for(6s)) second_waited = ms_since(released_at.load());
  });
  ASSERT_TRUE(eventually(3s, [&] { return queued(name) == 2; }));
  // The first waiter's next script is its cancel (nothing is sent after a
  // deadline but the cancel; until session 20 one last attempt went first,
  // and both were lost here): it is lost.
  const int rule = proxy().add_rule(
      {.command = "EVALSHA", .argument_contains = "|p|", .action = FaultAction::close_before_forward, .times = 1});
  first.join();
  EXPECT_TRUE(first_result.load() == 0 || first_result.load() == 2) << first_result.load();
  EXPECT_EQ(proxy().matched(rule), 1u);
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
