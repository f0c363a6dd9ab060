// integration/test_multi_lock_faults.cpp — MultiLock under faults its own
// suite does not attack: a lease that ends by the clock (no renewal, or a
// holder process paused past its TTL) and a server stall while 2 of 3 keys
// are held and the third is awaited.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/multi_lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class MultiLockFaults : public ClientTest {};

// DistributedLock::lost() promises true as soon as the provable lease end has
// passed, before any round trip. A MultiLock's lease is its keys' leases.
TEST_F(MultiLockFaults, LostTurnsTrueWhenTheKeysLeasesEndByTheClock) {
  const LockOptions options{.ttl = 300ms, .auto_renew = false};
  Lock single(client(), key("single"), options);
  MultiLock multi(client(), {key("b"), key("a")}, options);
  ASSERT_TRUE(single.try_lock());
  ASSERT_TRUE(multi.try_lock());
  EXPECT_FALSE(multi.lost());
  std::this_thread::sleep_for(450ms);
  EXPECT_TRUE(single.lost()) << "baseline: a Lock's lease ended by the clock";
  EXPECT_TRUE(multi.lost()) << "the MultiLock's keys expired but it still claims to hold them";
  EXPECT_THROW(multi.release(), LockNotOwned);
  EXPECT_THROW(single.release(), LockNotOwned);
}

// A MultiLock holder process SIGSTOPped past its TTL: a plain Lock gets a key
// after the TTL; the resumed holder sees lost() at once (never acts: MARKER
// stays unset) and its release reports LockNotOwned.
TEST_F(MultiLockFaults, ResumedHolderSeesTheLossAndNeverOverlaps) {
  const std::string a = key("a"), b = key("b");
  const std::string marker = key("marker");
  constexpr auto kTtl = 600ms;
  Child holder =
      spawn(worker_argv("stall_hold", {server().url(), a + "," + b, "multi", std::to_string(kTtl.count()), marker}));
  ASSERT_TRUE(holder.wait_for_output("acquired", 10s)) << holder.stderr_text();
  holder.kill(SIGSTOP);
  const auto stopped = Clock::now();
  Lock other(client(), b, {.ttl = 10s});
  ASSERT_TRUE(other.try_lock_for(5s)) << "the stopped holder's key never expired";
  EXPECT_LE(ms_since(stopped), kTtl.count() + 300);
  holder.kill(SIGCONT);
  const ProcessResult result = holder.wait(10s);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_NE(result.out.find("resumed lost=1"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("release=not_owned"), std::string::npos) << result.out;
  EXPECT_TRUE(raw({"GET", marker}).is_nil()) << "the resumed MultiLock holder acted while another held a key";
  EXPECT_TRUE(other.owned()) << "the stale release freed the new holder's key";
  other.unlock();
}

// The server stalls (< TTL) while a MultiLock holds a and b and waits for c.
// Afterwards no key stays held by nobody: each ends free or held by the
// live MultiLock, and all are free within TTL + 200 ms of the end.
TEST_F(MultiLockFaults, ServerStallWhileWaitingForTheLastKeyLeavesNoStrandedKey) {
  // One prefix: key() numbers its calls, and "…:10:b" sorts before "…:9:a".
  const std::string base = key("multi");
  const std::string a = base + ":a", b = base + ":b", c = base + ":c";
  constexpr auto kTtl = 1000ms;
  const Client fast(server().url() + "?socket_timeout=300ms");
  Lock blocker(client(), c, {.ttl = 10s});
  ASSERT_TRUE(blocker.try_lock());
  std::atomic<int> outcome{0};  // 1 acquired, 2 timed out, 3 typed error, 4 other
  std::atomic<bool> done{false};
  MultiLock multi(fast, {c, a, b}, {.ttl = kTtl});
  std::thread waiter([&] {
    try {
      outcome = multi.try_lock_for(3s) ? 1 : 2;
    } catch (const Error&) {
      outcome = 3;
    } catch (...) {
      outcome = 4;
    }
    done = true;
  });
  if (!eventually(3s, [&] { return exists(a) && exists(b); })) {
    blocker.unlock();
    waiter.join();
    FAIL() << "the MultiLock never held a and b (outcome " << outcome.load() << ")";
  }
  std::this_thread::sleep_for(50ms);  // now queued on c
  server().pause();
  std::this_thread::sleep_for(600ms);
  server().resume();
  blocker.unlock();
  EXPECT_TRUE(eventually(5s, [&] { return done.load(); })) << "the MultiLock hung after the stall";
  waiter.join();  // bounded: try_lock_for(3s) plus a socket timeout
  EXPECT_NE(outcome.load(), 4);
  const auto ended = Clock::now();
  if (outcome.load() == 1) {
    EXPECT_TRUE(multi.owned());
    EXPECT_NO_THROW(multi.release());
  } else {
    EXPECT_FALSE(multi.held());
  }
  for (const std::string& name : {a, b, c}) {
    EXPECT_TRUE(eventually(kTtl + 200ms, [&] { return !exists(name); }))
        << name << " stayed held by nobody for " << ms_since(ended) << " ms";
  }
}

}  // namespace
}  // namespace lockon::test
