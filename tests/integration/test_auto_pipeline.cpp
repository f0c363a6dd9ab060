// integration/test_auto_pipeline.cpp — automatic pipelining (client/pipeline.hpp,
// ConnectionOptions::auto_pipeline): many threads sharing one connection get
// their own replies, in order, through stalls (SIGSTOP), kills and a proxy
// that delays bytes; locks through it stay exclusive (exact non-atomic
// counters).
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <stdexcept>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"
#include "integration/auto_pipeline_support.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Pipeline;
using detail::ReplyPtr;

TEST(AutoPipeline, UrlParameterAndDefaultOn) {
  EXPECT_TRUE(ConnectionOptions{}.auto_pipeline);
  EXPECT_TRUE(ConnectionOptions::from_url("redis://127.0.0.1:6379").auto_pipeline);
  EXPECT_FALSE(ConnectionOptions::from_url("redis://127.0.0.1:6379?auto_pipeline=0").auto_pipeline);
  EXPECT_TRUE(ConnectionOptions::from_url("redis://127.0.0.1:6379?auto_pipeline=1").auto_pipeline);
  EXPECT_FALSE(ConnectionOptions::from_url("redis://127.0.0.1:6379?auto_pipeline=false").auto_pipeline);
  EXPECT_THROW(ConnectionOptions::from_url("redis://127.0.0.1:6379?auto_pipeline=maybe"), ConfigError);
}

TEST(AutoPipeline, SixtyFourThreadsGetTheirOwnRepliesInFewBatches) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 64;
  constexpr int kRounds = 100;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kRounds; ++i)
          set_get(pipeline, "ap:own:" + std::to_string(t), std::to_string(t) + ":" + std::to_string(i),
                  Clock::now() + 5s);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pipeline.requests(), std::uint64_t{kThreads * kRounds * 2});
  // Pipelining happened: fewer writes than requests.
  EXPECT_LT(pipeline.batches(), pipeline.requests());
  // One connection (plus the test's own probes) served all 64 threads.
  const std::string list = server.command({"CLIENT", "LIST"}).str;
  std::size_t clients = 0;
  for (auto at = list.find("id="); at != std::string::npos; at = list.find("id=", at + 1)) ++clients;
  EXPECT_LE(clients, 2u) << list;
}

// Exclusive sections through the lock layer on the shared connection; the
// counters are deliberately non-atomic read-modify-writes.
void run_counters(int key_count) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  constexpr int kThreads = 64;
  constexpr int kRounds = 20;
  std::vector<long> counters(static_cast<std::size_t>(key_count), 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const int key = t % key_count;
      try {
        Lock lock(client, "ap:counter:" + std::to_string(key), {.ttl = 30s});
        for (int i = 0; i < kRounds; ++i) {
          lock.lock();
          const long seen = counters[static_cast<std::size_t>(key)];
          std::this_thread::yield();
          counters[static_cast<std::size_t>(key)] = seen + 1;
          lock.unlock();
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(failures.load(), 0);
  long total = 0;
  for (int k = 0; k < key_count; ++k) {
    const long per_key = (kThreads / key_count + (k < kThreads % key_count ? 1 : 0)) * kRounds;
    EXPECT_EQ(counters[static_cast<std::size_t>(k)], per_key) << "key " << k;
    total += counters[static_cast<std::size_t>(k)];
  }
  EXPECT_EQ(total, long{kThreads} * kRounds);
  EXPECT_GT(pipeline_of(client).requests(), 0u);  // the lock layer used the shared connection
}

TEST(AutoPipeline, LocksOnDistinctKeysKeepExactCounters) { run_counters(64); }
TEST(AutoPipeline, LocksOnTenSharedKeysKeepExactCounters) { run_counters(10); }

TEST(AutoPipeline, StalledServerTimesOutEveryWaiterAndMisdeliversNothing) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 16;
  for (int t = 0; t < kThreads; ++t) set_get(pipeline, "ap:stall:" + std::to_string(t), "v" + std::to_string(t), Clock::now() + 2s);
  server.pause();
  std::atomic<int> timeouts{0};
  std::atomic<int> wrong{0};
  std::atomic<long long> worst_overrun_ms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::string key = "ap:stall:" + std::to_string(t);
      const std::array<std::string_view, 2> get{"GET", key};
      const auto deadline = Clock::now() + 300ms + std::chrono::milliseconds(t * 10);
      try {
        static_cast<void>(pipeline.call(get, deadline, "GET"));
        ++wrong;  // a paused server answers nothing
      } catch (const TimeoutError&) {
        ++timeouts;
        const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - deadline).count();
        long long seen = worst_overrun_ms.load();
        while (late > seen && !worst_overrun_ms.compare_exchange_weak(seen, late)) {
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not a TimeoutError: " << e.what();
        ++wrong;
      }
    });
  for (auto& thread : threads) thread.join();
  server.resume();
  EXPECT_EQ(timeouts.load(), kThreads);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LT(worst_overrun_ms.load(), 200) << "a waiter got its TimeoutError long after its deadline";
  // The stalled GETs' replies arrive now; none may reach a later request.
  for (int round = 0; round < 5; ++round)
    for (int t = 0; t < kThreads; ++t) {
      const std::string key = "ap:stall:" + std::to_string(t);
      const std::array<std::string_view, 2> get{"GET", key};
      EXPECT_EQ(text_of(pipeline.call(get, Clock::now() + 2s, "GET")), "v" + std::to_string(t));
    }
}

TEST(AutoPipeline, KilledServerGivesTypedErrorsThenRecovers) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 16;
  std::atomic<bool> stop{false};
  std::atomic<int> io_errors{0};
  std::atomic<int> other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const auto until = Clock::now() + 10s;
      for (int i = 0; !stop.load() && Clock::now() < until && i < 100000; ++i) {
        try {
          set_get(pipeline, "ap:kill:" + std::to_string(t), std::to_string(i), Clock::now() + 1s);
        } catch (const IoError&) {
          ++io_errors;
          std::this_thread::sleep_for(5ms);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "untyped or wrong: " << e.what();
          ++other;
          return;
        }
      }
    });
  std::this_thread::sleep_for(200ms);
  server.kill();
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(io_errors.load(), 0);
  server.restart();
  std::this_thread::sleep_for(300ms);
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(other.load(), 0);
  for (int t = 0; t < kThreads; ++t) set_get(pipeline, "ap:kill:" + std::to_string(t), "after", Clock::now() + 2s);
}

TEST(AutoPipeline, DelayingProxyDoesNotMisorderReplies) {
  RedisServer server;
  FaultProxy proxy("127.0.0.1", server.port());
  proxy.set_latency(300us);
  // Some GETs held back by the proxy: later commands queue behind them.
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 3ms, .times = 200});
  Client client(pipelined_options(proxy.port(), 2000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 32;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 30; ++i)
          set_get(pipeline, "ap:proxy:" + std::to_string(t), std::to_string(t * 1000 + i), Clock::now() + 5s);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(pipeline.batches(), pipeline.requests());
}

TEST(AutoPipeline, MultiExecFromManyThreadsStaysContiguous) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 32;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::string key = "ap:multi:" + std::to_string(t);
      const std::array<std::string_view, 1> multi{"MULTI"};
      const std::array<std::string_view, 2> incr{"INCR", key};
      const std::array<std::string_view, 1> exec{"EXEC"};
      const std::array<std::span<const std::string_view>, 4> commands{multi, incr, incr, exec};
      for (int i = 1; i <= 50; ++i) {
        const auto replies = pipeline.call_many(commands, Clock::now() + 5s, "MULTI/EXEC");
        // Another thread's command inside this MULTI would be QUEUED into
        // it (and EXEC would answer more than 2), or a nested MULTI error.
        const redisReply& result = *replies[3];
        if (replies.size() != 4 || text_of(replies[0]) != "OK" || text_of(replies[1]) != "QUEUED" ||
            result.type != REDIS_REPLY_ARRAY || result.elements != 2 || result.element[1]->integer != 2LL * i) {
          ++failures;
          return;
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(pipeline.batches(), pipeline.requests());
}

TEST(AutoPipeline, ForkedChildGetsItsOwnSharedConnection) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 2000ms));
  Pipeline& parent = pipeline_of(client);
  set_get(parent, "ap:fork:parent", "p1", Clock::now() + 2s);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The parent's socket is the parent's: the child must get a new Pipeline
    // (and connection) and still receive its own replies.
    int code = 0;
    try {
      Pipeline& mine = pipeline_of(client);
      if (&mine == &parent) code = 2;
      else set_get(mine, "ap:fork:child", "c1", Clock::now() + 2s);
      if (code == 0 && mine.requests() != 2) code = 3;
    } catch (...) {
      code = 1;
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  set_get(parent, "ap:fork:parent", "p2", Clock::now() + 2s);  // the parent's connection is intact
  EXPECT_EQ(server.command({"GET", "ap:fork:child"}).str, "c1");
}

// The default Client (auto_pipeline on): threads locking with short
// windows (try_lock_for 3 ms) share the connection with threads locking
// without one, while the server stalls 40 ms at a time. Short windows
// pass while their replies are owed; that must cost the other threads
// nothing: not one exception, not one unlock error.
TEST(AutoPipeline, DefaultClientShortWindowsNeverFailOtherThreadsLocks) {
  RedisServer server;
  const Client client(server.url());
  ASSERT_NE(client.impl()->any_node()->pipeline(), nullptr) << "auto_pipeline is the default";
  constexpr int kPlain = 8, kShort = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> plain_cycles{0}, plain_failures{0}, short_got{0}, short_missed{0}, short_timeouts{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kPlain + kShort; ++t)
    threads.emplace_back([&, t] {
      const bool short_window = t >= kPlain;
      Lock lock(client, "ap:default:" + std::to_string(t), {.ttl = short_window ? 2s : 10s});
      for (int i = 0; !stop.load() && i < 100000; ++i) {
        try {
          if (!short_window) {
            lock.lock();
            lock.unlock();
            if (lock.last_unlock_error() != nullptr) {
              ++plain_failures;
              ADD_FAILURE() << "unlock failed beside short windows";
            }
            ++plain_cycles;
          } else if (lock.try_lock_for(3ms)) {
            ++short_got;
            lock.unlock();
          } else {
            ++short_missed;
          }
        } catch (const TimeoutError& e) {
          if (!short_window) {
            ++plain_failures;
            ADD_FAILURE() << "a call without a window timed out: " << e.what();
          } else {
            ++short_timeouts;  // outcome unknown: allowed for the 3 ms caller
          }
        } catch (const std::exception& e) {
          ++plain_failures;
          ADD_FAILURE() << "thread " << t << ": " << e.what();
          return;
        }
      }
    });
  RawConnection staller = server.connect();
  for (int stall = 0; stall < 15; ++stall) {
    std::this_thread::sleep_for(30ms);
    staller.command({"DEBUG", "SLEEP", "0.04"});
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(plain_failures.load(), 0);
  EXPECT_GT(plain_cycles.load(), 100);
  EXPECT_GT(short_missed.load() + short_timeouts.load(), 0) << "no short window passed: the stalls did not bite";
  std::printf("[auto-pipeline default] plain cycles %d, short got %d, missed %d, timeouts %d\n", plain_cycles.load(),
              short_got.load(), short_missed.load(), short_timeouts.load());
}

}  // namespace
}  // namespace lockon::test
