// integration/test_lock_requeue.cpp — a Lock whose last acquisition had to
// wait goes straight to the queue for kContendedMemory (500 ms) instead of
// trying the fast SET NX first (lock.cpp, queue_directly()). What must hold:
// it still acquires a free key at once, still waits its turn behind a
// holder, gives up cleanly, keeps FIFO order across processes, and returns
// to the fast path when the contention is over.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LockRequeue : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = std::make_unique<Client>(server().url());
    raw_ = std::make_unique<RawConnection>(server().connect());
  }

  RawReply raw(const std::vector<std::string>& args) { return raw_->command(args); }

  // Scripts run so far (EVALSHA and EVAL): the queue's attempt is a script,
  // the fast path is a plain SET.
  long long scripts_run() { return lockon::test::scripts_run(*raw_); }

  // `waiter` waits for `name` behind `holder`, which releases after 100 ms.
  void wait_behind(Lock& holder, Lock& waiter) {
    ASSERT_TRUE(holder.try_lock());
    std::thread release([&] {
      std::this_thread::sleep_for(100ms);
      holder.unlock();
    });
    const bool got = waiter.try_lock_for(5s);
    release.join();
    ASSERT_TRUE(got);
  }

  std::unique_ptr<Client> client_;
  std::unique_ptr<RawConnection> raw_;
};

TEST_F(LockRequeue, AfterWaitingAFreeKeyIsTakenThroughTheQueueAtOnce) {
  const std::string name = key("lock");
  Lock holder(*client_, name, {.ttl = 10s});
  Lock waiter(*client_, name, {.ttl = 10s});
  wait_behind(holder, waiter);
  waiter.unlock();

  const long long before = scripts_run();
  const auto started = Clock::now();
  ASSERT_TRUE(waiter.try_lock_for(5s));
  EXPECT_LT(Clock::now() - started, 1s);
  EXPECT_GE(scripts_run() - before, 1) << "the acquisition right after a wait goes through the queue's script";
  EXPECT_TRUE(waiter.owned());
  EXPECT_EQ(raw({"LLEN", detail::companion_key(name, "q")}).integer, 0);
  waiter.unlock();
  EXPECT_EQ(raw({"EXISTS", name}).integer, 0);

  // It did not wait this time: the next acquisition is the fast path again.
  const long long after_uncontended = scripts_run();
  ASSERT_TRUE(waiter.try_lock_for(5s));
  EXPECT_EQ(scripts_run() - after_uncontended, 0);
  waiter.unlock();
}

TEST_F(LockRequeue, TheFastPathReturnsWhenTheContentionIsOld) {
  const std::string name = key("lock");
  Lock holder(*client_, name, {.ttl = 10s});
  Lock waiter(*client_, name, {.ttl = 10s});
  wait_behind(holder, waiter);
  waiter.unlock();
  std::this_thread::sleep_for(700ms);  // beyond the 500 ms memory
  const long long before = scripts_run();
  ASSERT_TRUE(waiter.try_lock_for(5s));
  EXPECT_EQ(scripts_run() - before, 0);
  waiter.unlock();
}

TEST_F(LockRequeue, AQueuedRetryStillWaitsForTheHolderAndExcludes) {
  const std::string name = key("lock");
  Lock holder(*client_, name, {.ttl = 10s});
  Lock waiter(*client_, name, {.ttl = 10s});
  wait_behind(holder, waiter);
  waiter.unlock();
  // Second contended acquisition, through the queue directly.
  ASSERT_TRUE(holder.try_lock());
  const long long before = scripts_run();
  const auto released_at = Clock::now() + 150ms;
  std::jthread release([&] {
    std::this_thread::sleep_until(released_at);
    holder.unlock();
  });
  ASSERT_TRUE(waiter.try_lock_for(5s));
  EXPECT_GE(Clock::now(), released_at) << "acquired while the holder still held the key";
  release.join();
  EXPECT_GE(scripts_run() - before, 2) << "queued (one script) and was handed the key by the release (another)";
  EXPECT_TRUE(waiter.owned());
  waiter.unlock();
}

TEST_F(LockRequeue, AQueuedRetryThatTimesOutLeavesNoQueuePlace) {
  const std::string name = key("lock");
  Lock holder(*client_, name, {.ttl = 10s});
  Lock waiter(*client_, name, {.ttl = 10s});
  wait_behind(holder, waiter);
  waiter.unlock();
  ASSERT_TRUE(holder.try_lock());
  EXPECT_FALSE(waiter.try_lock_for(100ms));
  EXPECT_EQ(raw({"LLEN", detail::companion_key(name, "q")}).integer, 0);
  EXPECT_TRUE(holder.owned());
  holder.unlock();
  // And a try_lock (no waiting) after contention is the plain attempt.
  EXPECT_TRUE(waiter.try_lock());
  waiter.unlock();
}

TEST_F(LockRequeue, FourProcessesStayInFifoOrder) {
  const std::string name = key("lock");
  const std::string list = key("order");
  const std::string ready = key("ready");
  std::vector<Child> workers;
  for (int i = 0; i < 4; ++i)
    workers.push_back(
        spawn(worker_argv("contend_log", {server().url(), name, list, "w" + std::to_string(i), ready, "4", "1500"})));
  long long total = 0;
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(30s);
    ASSERT_TRUE(result.succeeded()) << result.describe();
    total += std::stoll(result.out.substr(result.out.find("count ") + 6));
  }
  const RawReply order = raw({"LRANGE", list, "0", "-1"});
  ASSERT_EQ(static_cast<long long>(order.elements.size()), total);
  ASSERT_GE(total, 40) << "too few critical sections to judge the order";
  // FIFO with everyone queued: the releaser goes to the back of the line.
  // Until every worker has had its first section (they start together,
  // but one may be descheduled) the first ones may repeat, and so may the
  // last ones once a worker has stopped (each stops DURATION_MS after it
  // saw the others ready; a worker descheduled then runs on alone, and
  // under ctest -j2 beside another 4-process test one did so for 0.7 s):
  // re-takes count between the two.
  std::map<std::string, std::size_t> last_section;
  for (std::size_t i = 0; i < order.elements.size(); ++i) last_section[order.elements[i].str] = i;
  std::size_t first_to_stop = order.elements.size();
  for (const auto& [worker, at] : last_section) first_to_stop = std::min(first_to_stop, at);
  std::map<std::string, long long> shares;
  long long retakes = 0, judged = 0;
  for (std::size_t i = 0; i < order.elements.size(); ++i) {
    if (shares.size() == 4 && i <= first_to_stop) {
      ++judged;
      if (order.elements[i].str == order.elements[i - 1].str) ++retakes;
    }
    ++shares[order.elements[i].str];
  }
  std::cout << "same-holder re-takes while all four contended: " << retakes << " of " << judged << " sections ("
            << total << " in all)\n";
  ASSERT_GE(judged, 40) << "too few sections with all four contending to judge the order";
  EXPECT_LE(retakes, 3 + judged / 100) << retakes << " same-holder re-takes of " << judged;
  ASSERT_EQ(shares.size(), 4u);
  for (const auto& [worker, count] : shares) EXPECT_GE(count, total / 8) << worker << " got " << count << " of " << total;
  EXPECT_EQ(raw({"EXISTS", name}).integer, 0);
  EXPECT_EQ(raw({"LLEN", detail::companion_key(name, "q")}).integer, 0);
}

}  // namespace
}  // namespace lockon::test
