// integration/test_read_write_lock.cpp — lockon::ReadWriteLock (issue 16):
// readers share, writers exclude (threads and processes), the writer-
// preference bound behind a continuous stream of readers, hand-over
// latency, and a SIGKILLed reader whose share ends with its TTL.
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/read_write_lock.hpp"
#include "shared_lease_support.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ReadWriteLockTest : public ClientTest {
 protected:
  void SetUp() override {
    ClientTest::SetUp();
    if (HasFatalFailure()) return;
    pooled_ = std::make_unique<Client>(server().url(), PoolOptions{.size = 16, .wait_timeout = 10s});
    data_ = std::make_unique<Client>(server().url(), PoolOptions{.size = 16, .wait_timeout = 10s});
  }
  Client& pooled() { return *pooled_; }
  Client& data() { return *data_; }
  long long holders(const std::string& name) { return raw({"ZCARD", detail::companion_key(name, "sh")}).integer; }
  long long queued(const std::string& name) { return raw({"LLEN", detail::companion_key(name, "sq")}).integer; }
  long long number(const std::string& key) {
    const auto reply = raw({"GET", key});
    return reply.str.empty() ? 0 : std::stoll(reply.str);
  }

  // Thread-safe (the raw connection is not).
  long long shared_number(const std::string& key) {
    const Reply value = data().command({"GET", key});
    return value.is_nil() ? 0 : std::stoll(value.as_string());
  }

  std::unique_ptr<Client> pooled_;
  std::unique_ptr<Client> data_;
};

TEST_F(ReadWriteLockTest, ReadersShareAndWritersExclude) {
  const std::string name = key("rw");
  ReadWriteLock a(client(), name), b(client(), name), writer(client(), name);
  {
    std::shared_lock first(a);
    std::shared_lock second(b);
    EXPECT_TRUE(a.held_shared());
    EXPECT_TRUE(b.held_shared());
    EXPECT_EQ(holders(name), 2);
    EXPECT_FALSE(writer.try_lock());
    EXPECT_FALSE(writer.try_lock_for(50ms));
    EXPECT_EQ(queued(name), 0) << "a writer that gave up left its queue place";
  }
  EXPECT_EQ(holders(name), 0);
  {
    std::unique_lock exclusive(writer);
    EXPECT_TRUE(writer.held());
    EXPECT_FALSE(a.try_lock_shared());
    EXPECT_FALSE(b.try_lock());
  }
  EXPECT_TRUE(a.try_lock_shared_for(1s));
  a.unlock_shared();
  EXPECT_EQ(raw({"EXISTS", detail::companion_key(name, "sh")}).integer, 0);
}

TEST_F(ReadWriteLockTest, MisuseIsReported) {
  const std::string name = key("rw");
  EXPECT_THROW(ReadWriteLock(client(), ""), ConfigError);
  EXPECT_THROW(ReadWriteLock(client(), name, {.ttl = 0ms}), ConfigError);
  ReadWriteLock lock(client(), name);
  EXPECT_THROW(lock.release(), LockError);
  lock.lock_shared();
  EXPECT_THROW(lock.lock(), LockError) << "no upgrade: it would wait for itself";
  EXPECT_THROW(lock.lock_shared(), LockError);
  lock.unlock_shared();
  lock.lock();
  EXPECT_THROW(lock.lock_shared(), LockError) << "no downgrade";
  lock.release();
  EXPECT_FALSE(lock.held());
}

TEST_F(ReadWriteLockTest, ReleasedShareIsHandedToTheQueuedWriterAtOnce) {
  const std::string name = key("rw");
  ReadWriteLock reader(client(), name, {.wait_poll_interval = 10s});
  reader.lock_shared();
  std::atomic<long long> acquired_ns{0};
  std::jthread waiter([&] {
    ReadWriteLock writer(client(), name, {.wait_poll_interval = 10s});
    if (writer.try_lock_for(5s)) acquired_ns = Clock::now().time_since_epoch().count();
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  const auto released = Clock::now();
  reader.unlock_shared();
  waiter.join();
  ASSERT_NE(acquired_ns.load(), 0);
  const long long took_ms = (acquired_ns.load() - released.time_since_epoch().count()) / 1'000'000;
  std::cout << "hand-over reader -> writer: " << took_ms << " ms\n";
  EXPECT_LT(took_ms, 100) << "the writer waited for its poll instead of the wake-up";
}

// The policy itself: once a writer waits, a reader arriving later does not
// join the readers holding; it queues behind the writer.
TEST_F(ReadWriteLockTest, ReadersArrivingAfterAQueuedWriterWaitBehindIt) {
  const std::string name = key("rw");
  ReadWriteLock first(client(), name);
  first.lock_shared();
  std::atomic<int> order{0}, writer_at{0}, reader_at{0};
  std::jthread writer([&] {
    ReadWriteLock lock(pooled(), name, {.wait_poll_interval = 10s});
    if (!lock.try_lock_for(5s)) return;
    writer_at = ++order;
    std::this_thread::sleep_for(30ms);
    lock.unlock();
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  ReadWriteLock late(client(), name);
  EXPECT_FALSE(late.try_lock_shared()) << "a late reader joined while a writer waits";
  std::jthread reader([&] {
    ReadWriteLock lock(pooled(), name, {.wait_poll_interval = 10s});
    if (!lock.try_lock_shared_for(5s)) return;
    reader_at = ++order;
    lock.unlock_shared();
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 2; }));
  first.unlock_shared();
  writer.join();
  reader.join();
  EXPECT_EQ(writer_at.load(), 1);
  EXPECT_EQ(reader_at.load(), 2);
}

// Writers do a racy GET/SET increment; readers check the counter does not
// move while they hold. Readers must also overlap (the point of the lock).
TEST_F(ReadWriteLockTest, EightThreadsWritersExactReadersTogether) {
  const std::string name = key("rw");
  const std::string counter = key("counter");
  constexpr int kWriters = 4, kReaders = 4, kRounds = 60;
  std::atomic<int> readers_inside{0}, peak_readers{0}, writers_inside{0}, violations{0};
  Crew crew;
  crew.run(kWriters + kReaders, [&](int i) {
    ReadWriteLock lock(pooled(), name, {.ttl = 10s});
    for (int round = 0; round < kRounds; ++round) {
      if (i < kWriters) {
        if (!lock.try_lock_for(30s)) throw std::runtime_error("writer timed out");
        if (++writers_inside != 1 || readers_inside.load() != 0) ++violations;
        const long long value = shared_number(counter);
        data().command({"SET", counter, std::to_string(value + 1)});
        --writers_inside;
        lock.unlock();
      } else {
        if (!lock.try_lock_shared_for(30s)) throw std::runtime_error("reader timed out");
        raise_peak(peak_readers, ++readers_inside);
        if (writers_inside.load() != 0) ++violations;
        const long long first = shared_number(counter);
        std::this_thread::sleep_for(500us);
        if (shared_number(counter) != first) ++violations;
        --readers_inside;
        lock.unlock_shared();
      }
    }
  });
  crew.join();
  EXPECT_EQ(crew.errors(), "");
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(number(counter), kWriters * kRounds);
  // Mixed with writers, readers overlap only when they queue next to each
  // other (FIFO: a writer between two readers separates them), which a
  // loaded run may never produce (seen once under ASan: peak 1). Shown,
  // not asserted; the readers-only round below must overlap.
  std::cout << "peak concurrent readers among writers: " << peak_readers.load() << "\n";
  EXPECT_EQ(holders(name), 0);
  EXPECT_EQ(queued(name), 0);

  // Readers alone, each holding 50 ms: they must hold together.
  peak_readers = 0;
  Crew readers;
  readers.run(kReaders, [&](int) {
    ReadWriteLock lock(pooled(), name, {.ttl = 10s});
    if (!lock.try_lock_shared_for(10s)) throw std::runtime_error("reader timed out");
    raise_peak(peak_readers, ++readers_inside);
    std::this_thread::sleep_for(50ms);
    --readers_inside;
    lock.unlock_shared();
  });
  readers.join();
  EXPECT_EQ(readers.errors(), "");
  EXPECT_GE(peak_readers.load(), 2) << "readers never held together";
  std::cout << "peak concurrent readers alone: " << peak_readers.load() << "\n";
}

TEST_F(ReadWriteLockTest, FourProcessesWritersExactReadersUndisturbed) {
  const std::string name = key("rw");
  const std::string counter = key("counter");
  constexpr int kProcesses = 4, kRounds = 80;
  std::vector<Child> workers;
  for (int i = 0; i < kProcesses; ++i)
    workers.push_back(spawn(worker_argv("rw_mix", {server().url(), name, counter, std::to_string(kRounds)})));
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(90s);
    EXPECT_TRUE(result.succeeded()) << result.describe() << worker.stdout_text();
  }
  EXPECT_EQ(number(counter), kProcesses * kRounds);
  EXPECT_EQ(holders(name), 0);
}

// Policy bound: a writer waits at most for the readers holding when it
// queued (each holds 20 ms here) — never for readers arriving after it.
TEST_F(ReadWriteLockTest, WriterBehindAContinuousStreamOfReadersGetsInWithinTheBound) {
  const std::string name = key("rw");
  constexpr auto kReaderHold = 20ms;
  std::atomic<bool> stop{false};
  std::atomic<long long> reads{0};
  Crew readers;
  readers.run(6, [&](int) {
    ReadWriteLock lock(pooled(), name, {.ttl = 10s});
    // Bounded: the stream runs until `stop`, at most 20 s.
    const auto end = Clock::now() + 20s;
    while (!stop.load() && Clock::now() < end) {
      if (!lock.try_lock_shared_for(10s)) continue;
      std::this_thread::sleep_for(kReaderHold);
      lock.unlock_shared();
      ++reads;
    }
  });
  // The readers overlap continuously: without writer preference the lock
  // would never be free of readers.
  ASSERT_TRUE(eventually(5s, [&] { return reads.load() >= 30; }));
  long long worst_ms = 0;
  for (int i = 0; i < 5; ++i) {
    ReadWriteLock writer(pooled(), name, {.ttl = 10s});
    const auto start = Clock::now();
    const bool acquired = writer.try_lock_for(5s);
    const long long took = ms_since(start);
    ASSERT_TRUE(acquired) << "writer starved by the readers";
    writer.unlock();
    worst_ms = std::max(worst_ms, took);
    std::this_thread::sleep_for(50ms);
  }
  const long long reads_before = reads.load();
  ASSERT_TRUE(eventually(5s, [&] { return reads.load() > reads_before + 10; })) << "readers stopped";
  stop = true;
  readers.join();
  EXPECT_EQ(readers.errors(), "");
  std::cout << "writer behind 6 readers (20 ms holds): worst wait " << worst_ms << " ms\n";
  // The bound: one reader hold (20 ms) plus round trips; 250 ms of slack
  // for a loaded machine, far below the 5 s timeout starvation would hit.
  EXPECT_LT(worst_ms, 270);
}

TEST_F(ReadWriteLockTest, KilledReaderFreesItsShareWithinTtl) {
  const std::string name = key("rw");
  constexpr auto kTtl = 1000ms;
  Child reader = spawn(worker_argv("rw_hold", {server().url(), name, "read", std::to_string(kTtl.count())}));
  ASSERT_TRUE(reader.wait_for_output("acquired", 10s)) << reader.stderr_text();
  // Let the watchdog renew at least once: the share outlives one ttl.
  std::this_thread::sleep_for(kTtl + 200ms);
  ASSERT_EQ(holders(name), 1) << "the share was not renewed";
  std::atomic<long long> acquired_ns{0};
  // Poll interval far above the ttl: only the expiry-driven retry counts.
  std::jthread waiter([&] {
    ReadWriteLock writer(client(), name, {.wait_poll_interval = 30s});
    if (writer.try_lock_for(10s)) acquired_ns = Clock::now().time_since_epoch().count();
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 1; }));
  const auto killed = Clock::now();
  reader.kill(SIGKILL);
  waiter.join();
  ASSERT_NE(acquired_ns.load(), 0) << "the crashed reader's share never ended";
  const long long took_ms = (acquired_ns.load() - killed.time_since_epoch().count()) / 1'000'000;
  std::cout << "writer in after a SIGKILLed reader: " << took_ms << " ms (ttl " << kTtl.count() << " ms)\n";
  EXPECT_LE(took_ms, kTtl.count() + 200);
}

TEST_F(ReadWriteLockTest, KilledWriterFreesTheLockForQueuedReadersWithinTtl) {
  const std::string name = key("rw");
  constexpr auto kTtl = 800ms;
  Child writer = spawn(worker_argv("rw_hold", {server().url(), name, "write", std::to_string(kTtl.count())}));
  ASSERT_TRUE(writer.wait_for_output("acquired", 10s)) << writer.stderr_text();
  std::atomic<int> readers_in{0};
  std::atomic<long long> last_ns{0};
  Crew readers;
  readers.run(3, [&](int) {
    ReadWriteLock reader(pooled(), name, {.wait_poll_interval = 30s});
    if (reader.try_lock_shared_for(10s)) {
      ++readers_in;
      raise_peak(last_ns, static_cast<long long>(Clock::now().time_since_epoch().count()));
      std::this_thread::sleep_for(100ms);  // all three hold together
    }
  });
  ASSERT_TRUE(eventually(5s, [&] { return queued(name) == 3; }));
  const auto killed = Clock::now();
  writer.kill(SIGKILL);
  readers.join();
  EXPECT_EQ(readers.errors(), "");
  ASSERT_EQ(readers_in.load(), 3);
  const long long took_ms = (last_ns.load() - killed.time_since_epoch().count()) / 1'000'000;
  std::cout << "3 readers in after a SIGKILLed writer: " << took_ms << " ms (ttl " << kTtl.count() << " ms)\n";
  EXPECT_LE(took_ms, kTtl.count() + 200);
}

TEST_F(ReadWriteLockTest, ShareIsRenewedBeyondItsTtlAndLossIsReported) {
  const std::string name = key("rw");
  std::atomic<int> lost{0};
  ReadWriteLock reader(client(), name, {.ttl = 300ms, .on_lost = [&](const LossEvent&) { ++lost; }});
  reader.lock_shared();
  std::this_thread::sleep_for(800ms);
  EXPECT_FALSE(reader.lost());
  ReadWriteLock writer(client(), name);
  EXPECT_FALSE(writer.try_lock()) << "the share expired although renewed";
  // Someone removes the share: the watchdog notices and reports it.
  raw({"DEL", detail::companion_key(name, "sh")});
  ASSERT_TRUE(eventually(2s, [&] { return lost.load() == 1; }));
  EXPECT_TRUE(reader.lost());
  EXPECT_THROW(reader.release(), LockError);  // not held any more... or not owned
}

}  // namespace
}  // namespace lockon::test
