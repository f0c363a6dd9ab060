// integration/test_sentinel_demoted_master.cpp — issue 33, found by the
// harness's Sentinel topology (seed 33, an undone failover): when the
// server the sentinels name is a replica, every acquisition failed at once
// with READONLY — ~5,000 failed acquisitions a second on one worker for
// 27 s — instead of waiting within its deadline for a master.
//
// Set-up: real master, replica and 3 sentinels. The master is demoted by
// hand (REPLICAOF its own replica): nothing is writable, and the sentinels
// go on naming it for far longer than the test (they act on a master that
// reports itself a replica only after down-after + 2 INFO periods, ~21 s).
// Then REPLICAOF NO ONE makes it a master again, within a waiting call's
// deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "integration/sentinel_failover_support.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(SentinelDemotedMaster, ReadOnlyWaitsForAMasterWithinTheDeadlineAndTakesItBack) {
  SentinelSet set;
  Client client(set.url(kShortTimeouts));
  const std::string name = unique_key("demoted");
  {
    Lock lock(client, name);
    ASSERT_TRUE(lock.try_lock_for(2s));  // resolved, pooled
    lock.unlock();
  }
  set.master().command({"REPLICAOF", "127.0.0.1", std::to_string(set.replica().port())});
  ASSERT_TRUE(is_replica(set.master()));

  // One second of try_lock_for(200 ms): each call waits for a master with a
  // back-off (1 ms doubling to 100 ms) until the next pause would pass its
  // deadline — from ~130 ms on — and ends with a typed error or false; none
  // fails at once in a loop.
  constexpr auto kWait = 200ms;
  int calls = 0;
  int typed = 0;
  long long longest_ms = 0;
  long long shortest_ms = 1'000'000;
  const auto start = Clock::now();
  while (Clock::now() - start < 1s && calls < 1000) {
    ++calls;
    const auto call_start = Clock::now();
    try {
      Lock lock(client, name);
      EXPECT_FALSE(lock.try_lock_for(kWait)) << "nothing is writable";
    } catch (const ReadOnlyError&) {
      ++typed;
    } catch (const ConnectError&) {
      ++typed;  // "not a master (ROLE)": the sentinels' answer, refused
    }
    const long long took = ms_since(call_start);
    longest_ms = std::max(longest_ms, took);
    shortest_ms = std::min(shortest_ms, took);
  }
  std::cout << calls << " calls in 1 s (" << typed << " typed errors), each " << shortest_ms << "–" << longest_ms
            << " ms for a " << kWait.count() << " ms wait\n";
  EXPECT_LE(calls, 15) << "before: hundreds, each failing at once";
  EXPECT_GE(shortest_ms, 80) << "a call gave up without waiting for a master";
  EXPECT_LE(longest_ms, kWait.count() + 250) << "a call overran its deadline";

  // The master comes back within a waiting call's deadline: the call takes the lock.
  std::jthread undo([&] {
    std::this_thread::sleep_for(300ms);
    set.master().command({"REPLICAOF", "NO", "ONE"});
  });
  Lock lock(client, name);
  const auto waited_from = Clock::now();
  bool acquired = false;
  try {
    acquired = lock.try_lock_for(3s);
  } catch (const Error& e) {
    ADD_FAILURE() << "the master came back 300 ms into a 3 s wait: " << e.what();
  }
  EXPECT_TRUE(acquired);
  EXPECT_GE(ms_since(waited_from), 250) << "it had to wait for the master";
  if (acquired) lock.unlock();
}

}  // namespace
}  // namespace lockon::test
