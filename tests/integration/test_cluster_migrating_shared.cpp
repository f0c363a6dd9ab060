// integration/test_cluster_migrating_shared.cpp — ReadWriteLock and
// Semaphore while their name's slot migrates (issue 33, §2 and §3).
//
// §3: with a waiter queued by the holder's own process, all three keys
// ({K}:sh, {K}:sq, {K}:shs) are on the source, so the scripts run there.
// They used to delete an emptied key and read (or write) it again — the
// release's ZREM emptied {K}:sh and fits() read it with ZCARD — which Redis
// refuses there: the release failed half-done (share removed, nobody handed
// it, the caller told its lease was lost).
// §2: with one key alone on the source, every script gets TRYAGAIN until the
// migration ends. A release refused that long used to leave the share in
// {K}:sh until its TTL; it is now retried in the background.
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"

#include "cluster_migrating_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs `body` (an acquisition) on a thread of its own; the test reads the
// outcome after join(). The object it acquires belongs to the test thread
// again after join().
class Waiter {
 public:
  template <class F>
  explicit Waiter(F body)
      : thread_([this, body] {
          try {
            acquired_ = body();
          } catch (const std::exception& e) {
            error_ = e.what();
          }
          at_ = Clock::now();
        }) {}
  ~Waiter() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  bool acquired() const { return acquired_; }
  const std::string& error() const { return error_; }
  Clock::time_point at() const { return at_; }

 private:
  bool acquired_ = false;
  std::string error_;
  Clock::time_point at_{};
  std::thread thread_;
};

// A holder releases while a waiter of its own process is queued and the
// slot is MIGRATING with every key on the source: the release runs there,
// completes, and hands the name to the waiter, whose acquisition ends
// true. The caller's lease is not declared lost.
// keys: holders, queue, hand-over record.
template <class Hold, class Release, class Wait>
void expect_handed_over_while_migrating(const std::vector<std::string>& keys, Hold hold, Release release, Wait wait,
                                        RedisServer& source, const std::function<void()>& begin,
                                        const std::function<void()>& end) {
  const std::string& queue = keys[1];
  ASSERT_TRUE(hold());
  Waiter waiter(wait);
  ASSERT_TRUE(eventually(5s, [&] { return source.command({"LLEN", queue}).integer == 1; })) << "the waiter never queued";
  bool all = true;
  for (const std::string& k : keys) all = all && source.command({"EXISTS", k}).integer == 1;
  ASSERT_TRUE(all) << "not every key of the name is on the source: the scripts would not run there";
  begin();
  const auto released_at = Clock::now();
  std::string error;
  bool lost = false;
  try {
    lost = release();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "") << "the release failed during the migration";
  EXPECT_FALSE(lost) << "the caller was told its lease was lost";
  // Nothing may be left of the release: the queue is empty, the waiter's
  // share the only one.
  EXPECT_EQ(source.command({"EXISTS", queue}).integer, 0) << "the waiter's entry stayed queued";
  EXPECT_EQ(source.command({"ZCARD", keys[0]}).integer, 1) << "the waiter was not handed the name";
  // Ended first: a waiter that needs a round trip to confirm its hand-over
  // would get TRYAGAIN meanwhile (its queue key is gone).
  end();
  waiter.join();
  EXPECT_EQ(waiter.error(), "");
  EXPECT_TRUE(waiter.acquired()) << "the waiter did not get in";
  std::cout << "the waiter got in " << std::chrono::duration_cast<std::chrono::milliseconds>(waiter.at() - released_at).count()
            << " ms after the release\n";
}

TEST_F(ClusterMigrating, WriterReleaseHandsOverToAQueuedReader) {
  const Client client(cluster().url());
  ReadWriteLock writer(client, name_, {.ttl = 20s});
  ReadWriteLock reader(client, name_, {.ttl = 20s});
  expect_handed_over_while_migrating(
      {key("sh"), key("sq"), key("shs")}, [&] { return writer.try_lock(); },
      [&] {
        writer.release();
        return writer.lost();
      },
      [&] { return reader.try_lock_shared_for(10s); }, *source_, [&] { begin_migration(); }, [&] { end_migration(); });
  reader.unlock_shared();
  EXPECT_EQ(reader.last_unlock_error(), nullptr);
}

TEST_F(ClusterMigrating, ReaderReleaseHandsOverToAQueuedWriter) {
  const Client client(cluster().url());
  ReadWriteLock reader(client, name_, {.ttl = 20s});
  ReadWriteLock writer(client, name_, {.ttl = 20s});
  expect_handed_over_while_migrating(
      {key("sh"), key("sq"), key("shs")}, [&] { return reader.try_lock_shared(); },
      [&] {
        reader.release();
        return reader.lost();
      },
      [&] { return writer.try_lock_for(10s); }, *source_, [&] { begin_migration(); }, [&] { end_migration(); });
  writer.unlock();
  EXPECT_EQ(writer.last_unlock_error(), nullptr);
}

TEST_F(ClusterMigrating, PermitReleaseHandsOverToAQueuedWaiter) {
  const Client client(cluster().url());
  Semaphore holder(client, name_, 1, {.ttl = 20s});
  Semaphore waiter(client, name_, 1, {.ttl = 20s});
  expect_handed_over_while_migrating(
      {key("sh"), key("sq"), key("shs")}, [&] { return holder.try_acquire(); },
      [&] {
        holder.release_or_throw();
        return holder.lost();
      },
      [&] { return waiter.try_acquire_for(10s); }, *source_, [&] { begin_migration(); }, [&] { end_migration(); });
  EXPECT_NO_THROW(waiter.release_or_throw());
}

// The acquisition script on the source: one of two permits lapses (not
// renewed) during the migration, and the queued waiter's next attempt —
// which pops its own entry, emptying {K}:sq, then looks at the queue's head
// again — takes it. (With one permit, {K}:sh itself would expire with the
// lapsed share, and every script get TRYAGAIN until the migration ends.)
TEST_F(ClusterMigrating, WaiterTakesAPermitWhoseHolderLapsed) {
  const Client client(cluster().url());
  Semaphore lapsing(client, name_, 2, {.ttl = 1500ms, .auto_renew = false});
  Semaphore holder(client, name_, 2, {.ttl = 20s});
  Semaphore next(client, name_, 2, {.ttl = 20s});
  ASSERT_TRUE(lapsing.try_acquire());
  ASSERT_TRUE(holder.try_acquire());
  Waiter waiter([&] { return next.try_acquire_for(10s); });
  ASSERT_TRUE(eventually(5s, [&] { return source_->command({"LLEN", key("sq")}).integer == 1; }));
  ASSERT_TRUE(all_on_source({key("sh"), key("sq"), key("shs")}));
  begin_migration();
  waiter.join();
  const bool still_migrating = migrating_;
  end_migration();
  EXPECT_TRUE(still_migrating);
  EXPECT_EQ(waiter.error(), "") << "the acquisition failed during the migration";
  EXPECT_TRUE(waiter.acquired());
  EXPECT_NO_THROW(next.release_or_throw());
  EXPECT_NO_THROW(holder.release_or_throw());
}

// §2: the release gets TRYAGAIN for longer than it waits (its share alone
// on the source). It throws ServerBusyError, and once the migration ends the
// background clean-up removes the share: the next holder gets in at once,
// not when the share's 20 s lease ends.
template <class Release, class Next>
void expect_finished_in_background(Release release, Next next, const std::function<void()>& end) {
  const auto start = Clock::now();
  bool busy = false;
  try {
    release();
  } catch (const ServerBusyError&) {
    busy = true;
  }
  EXPECT_TRUE(busy) << "the release was expected to be refused (TRYAGAIN) for the whole migration";
  std::cout << "the release gave up after " << ms_since(start) << " ms\n";
  end();
  const auto ended = Clock::now();
  EXPECT_TRUE(next()) << "the released share stayed in {K}:sh";
  std::cout << "the next holder got in " << ms_since(ended) << " ms after the migration ended\n";
}

TEST_F(ClusterMigrating, ReadShareReleaseRefusedForTheWholeMigrationEndsInTheBackground) {
  const Client client(cluster().url());
  ReadWriteLock reader(client, name_, {.ttl = 20s});
  ASSERT_TRUE(reader.try_lock_shared());
  begin_migration();
  ReadWriteLock writer(client, name_, {.ttl = 20s});
  expect_finished_in_background([&] { reader.release(); }, [&] { return writer.try_lock_for(5s); },
                                [&] { end_migration(); });
  EXPECT_TRUE(reader.lost());
  writer.unlock();
}

TEST_F(ClusterMigrating, WriterReleaseRefusedForTheWholeMigrationEndsInTheBackground) {
  const Client client(cluster().url());
  ReadWriteLock writer(client, name_, {.ttl = 20s});
  ASSERT_TRUE(writer.try_lock());
  begin_migration();
  ReadWriteLock reader(client, name_, {.ttl = 20s});
  expect_finished_in_background([&] { writer.release(); }, [&] { return reader.try_lock_shared_for(5s); },
                                [&] { end_migration(); });
  reader.unlock_shared();
}

TEST_F(ClusterMigrating, PermitReleaseRefusedForTheWholeMigrationEndsInTheBackground) {
  const Client client(cluster().url());
  Semaphore holder(client, name_, 1, {.ttl = 20s});
  ASSERT_TRUE(holder.try_acquire());
  begin_migration();
  Semaphore next(client, name_, 1, {.ttl = 20s});
  expect_finished_in_background([&] { holder.release_or_throw(); }, [&] { return next.try_acquire_for(5s); },
                                [&] { end_migration(); });
  next.release();
}

}  // namespace
}  // namespace lockon::test
