// integration/test_cluster_migrating_lock.cpp — Lock's hand-over scripts
// while the lock's slot migrates (issue 33, §3). They declare seven keys, so
// they run on the MIGRATING source only when it has all seven: a fenced lock
// (its fence counter), handed over once (the hand-over record and its
// process record), with holder records (the holder's and a queued waiter's)
// and a queue. There a release handing K past a waiter gone (PUBLISH heard by
// nobody) used to delete the holder record for that waiter, pop the last
// entry, then write the holder record of the next one: refused, half-done.
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"

#include "cluster_migrating_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ClusterMigratingLock : public ClusterMigrating {
 protected:
  LockOptions options() const { return {.ttl = 20s, .fencing = true}; }
  std::vector<std::string> all_keys() const {
    return {name_, key("q"), key("fence"), key("hf"), key("who"), key("qwho"), key("hs")};
  }
  // `holder` gets K by a hand-over from a first holder (so every record of
  // a hand-over exists).
  void take_by_hand_over(Lock& holder) {
    const Client client(cluster().url());
    Lock first(client, name_, options());
    ASSERT_TRUE(first.try_lock());
    std::thread waiting([&] { holder.try_lock_for(10s); });
    const bool queued = eventually(5s, [&] { return source_->command({"LLEN", key("q")}).integer == 1; });
    first.unlock();
    waiting.join();
    ASSERT_TRUE(queued);
    ASSERT_TRUE(holder.held());
  }
  // Runs `body` (an acquisition) on a thread until join(): the Lock belongs
  // to the test thread again after it.
  struct Waiting {
    std::atomic<bool> acquired{false};
    std::string error;
    Clock::time_point at{};
    std::thread thread;
    ~Waiting() {
      if (thread.joinable()) thread.join();
    }
  };
  void wait_in_background(Waiting& w, Lock& lock) {
    w.thread = std::thread([&w, &lock] {
      try {
        w.acquired = lock.try_lock_for(10s);
      } catch (const std::exception& e) {
        w.error = e.what();
      }
      w.at = Clock::now();
    });
  }
};

// Release: the queue's head is a waiter whose process is gone (its entry is
// heard by nobody); the live waiter behind it gets K, the release succeeds
// and the holder is not told its lease was lost.
TEST_F(ClusterMigratingLock, ReleasePastAGoneWaiterHandsTheLockToTheNext) {
  const Client client(cluster().url());
  Lock holder(client, name_, options());
  take_by_hand_over(holder);
  // A waiter of a process gone: nobody listens on its wake channel.
  const RawReply pushed =
      source_->command({"RPUSH", key("q"), "gone.0123456789ab|w0|20000|1|gone-token.0123456789ab"});
  ASSERT_FALSE(pushed.is_error()) << pushed.to_string();
  Lock next(client, name_, options());
  Waiting waiting;
  wait_in_background(waiting, next);
  ASSERT_TRUE(eventually(5s, [&] { return source_->command({"LLEN", key("q")}).integer == 2; }));
  ASSERT_TRUE(all_on_source(all_keys())) << "not every key of the lock is on the source";
  begin_migration();
  const auto released_at = Clock::now();
  std::string error;
  try {
    holder.release();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "") << "the release failed during the migration";
  EXPECT_FALSE(holder.lost()) << "the holder was told its lease was lost";
  EXPECT_EQ(source_->command({"EXISTS", key("q")}).integer, 0) << "an entry stayed queued";
  end_migration();
  waiting.thread.join();
  EXPECT_EQ(waiting.error, "");
  EXPECT_TRUE(waiting.acquired.load()) << "the live waiter did not get the lock";
  std::cout << "the next waiter got the lock " << std::chrono::duration_cast<std::chrono::milliseconds>(waiting.at - released_at).count()
            << " ms after the release\n";
  if (next.held()) EXPECT_NO_THROW(next.release());
}

// Acquisition: a waiter queues while the slot migrates (its attempt runs on
// the source, which has every key) and is handed K by the release.
TEST_F(ClusterMigratingLock, WaiterQueuedDuringTheMigrationIsHandedTheLock) {
  const Client client(cluster().url());
  Lock holder(client, name_, options());
  take_by_hand_over(holder);
  Lock ahead(client, name_, options());
  Waiting first;
  wait_in_background(first, ahead);
  ASSERT_TRUE(eventually(5s, [&] { return source_->command({"LLEN", key("q")}).integer == 1; }));
  ASSERT_TRUE(all_on_source(all_keys())) << "not every key of the lock is on the source";
  begin_migration();
  Lock next(client, name_, options());
  Waiting second;
  wait_in_background(second, next);
  const bool queued = eventually(5s, [&] { return source_->command({"LLEN", key("q")}).integer == 2; });
  EXPECT_TRUE(queued) << "the waiter did not queue on the source during the migration";
  EXPECT_NO_THROW(holder.release());
  first.thread.join();
  EXPECT_EQ(first.error, "");
  EXPECT_TRUE(first.acquired.load());
  if (ahead.held()) EXPECT_NO_THROW(ahead.release());
  end_migration();
  second.thread.join();
  EXPECT_EQ(second.error, "");
  EXPECT_TRUE(second.acquired.load());
  if (next.held()) EXPECT_NO_THROW(next.release());
}

}  // namespace
}  // namespace lockon::test
