// integration/test_auto_pipeline_io.cpp — the I/O-thread path of automatic
// pipelining (client/pipeline.hpp): callers asleep on their own futex word
// while the I/O thread owns the shared connection. Attacks: the server
// frozen (SIGSTOP) under 32 threads of traffic, a deadline passing while a
// request is queued behind a slow exchange (it must fail unsent: the key it
// would write stays absent), and short deadlines passing while replies are
// owed (that request alone fails, typed and on time; its late reply reaches
// nobody; the others written with it go on).
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"
#include "integration/auto_pipeline_support.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Pipeline;
using detail::ReplyPtr;

TEST(AutoPipelineIoThread, FrozenServerUnderTrafficWakesEveryWaiterOnTimeTypedAndMisdeliversNothing) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 32;
  constexpr auto kDeadline = 250ms;
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, timeouts{0}, other_io{0}, wrong{0};
  std::atomic<long long> worst_overrun_ms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::string key = "ap:io:freeze:" + std::to_string(t);
      for (int i = 0; !stop.load() && i < 200000; ++i) {
        const auto deadline = Clock::now() + kDeadline;
        try {
          set_get(pipeline, key, std::to_string(i), deadline);
          ++ok;
        } catch (const TimeoutError&) {
          ++timeouts;
        } catch (const IoError&) {
          ++other_io;  // a reconnect to the frozen server may fail otherwise (typed)
        } catch (const std::exception& e) {
          ADD_FAILURE() << "thread " << t << ": " << e.what();  // a misdelivered reply, or untyped
          ++wrong;
          return;
        }
        const long long late = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - deadline).count();
        long long seen = worst_overrun_ms.load();
        while (late > seen && !worst_overrun_ms.compare_exchange_weak(seen, late)) {
        }
      }
    });
  std::this_thread::sleep_for(400ms);
  const auto io_batches_before = pipeline.io_thread_batches();
  const int ok_before = ok.load();
  server.pause();
  std::this_thread::sleep_for(800ms);
  server.resume();
  std::this_thread::sleep_for(400ms);
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_GT(io_batches_before, 0u) << "the traffic never reached the I/O thread";
  EXPECT_GT(ok_before, 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(timeouts.load(), kThreads) << "every thread had a call in the frozen window";
  // Each call ended near its deadline: waiters asleep on the I/O thread's
  // wake path are failed (in flight) or time out by themselves (queued).
  EXPECT_LT(worst_overrun_ms.load(), 250) << "a waiter was woken long after its deadline";
  EXPECT_GT(ok.load(), ok_before) << "no traffic after the server resumed";
  for (int t = 0; t < kThreads; ++t)
    EXPECT_NO_THROW(set_get(pipeline, "ap:io:freeze:" + std::to_string(t), "after", Clock::now() + 2s));
}

// Every caller asleep on the I/O thread's path is woken (by the owner or by
// the caller before it in the round's wake chain): a lost wake-up would
// leave a call asleep until its deadline (10 s here), so the slowest call
// shows it.
TEST(AutoPipelineIoThread, WakeChainLosesNobody) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 64;
  constexpr int kRounds = 150;
  std::atomic<int> failures{0};
  std::atomic<long long> slowest_ms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const std::string key = "ap:io:chain:" + std::to_string(t);
      for (int i = 0; i < kRounds; ++i) {
        const auto started = Clock::now();
        try {
          set_get(pipeline, key, std::to_string(i), started + 10s);
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
          ++failures;
          return;
        }
        const long long took = ms_since(started);
        long long seen = slowest_ms.load();
        while (took > seen && !slowest_ms.compare_exchange_weak(seen, took)) {
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LT(slowest_ms.load(), 3000) << "a caller slept until its deadline: a lost wake-up";
  EXPECT_GT(pipeline.io_thread_batches(), 0u);
  EXPECT_LT(pipeline.batches(), pipeline.requests());
}

TEST(AutoPipelineIoThread, DeadlineWhileQueuedBehindASlowReplyFailsUnsent) {
  RedisServer server;
  server.command({"SET", "ap:io:slow:a", "A"});
  server.command({"SET", "ap:io:slow:b", "B"});
  FaultProxy proxy("127.0.0.1", server.port());
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 700ms, .times = 2});
  Client client(pipelined_options(proxy.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  const std::array<std::string_view, 2> get_a{"GET", "ap:io:slow:a"};
  const std::array<std::string_view, 2> get_b{"GET", "ap:io:slow:b"};
  const std::array<std::string_view, 3> set_1{"SET", "ap:io:unsent:1", "x"};
  const std::array<std::string_view, 3> set_2{"SET", "ap:io:unsent:2", "x"};
  const auto t0 = Clock::now();
  // A: the caller's own exchange, held 700 ms by the proxy.
  auto a = start(t0, [&] { return text_of(pipeline.call(get_a, Clock::now() + 5s, "GET a")); });
  std::this_thread::sleep_for(150ms);
  // B: queued behind A; handed to the I/O thread when A is done, held 700 ms.
  auto b = start(t0, [&] { return text_of(pipeline.call(get_b, Clock::now() + 5s, "GET b")); });
  std::this_thread::sleep_for(100ms);
  // 1: queued behind A's exchange, deadline long before A's reply.
  auto one = start(t0, [&] { return text_of(pipeline.call(set_1, Clock::now() + 150ms, "SET 1")); });
  const Outcome first = one.get();
  // 2: queued while the I/O thread waits for B's reply (it writes nothing
  // new until that read returns).
  while (ms_since(t0) < 1000) std::this_thread::sleep_for(10ms);
  auto two = start(t0, [&] { return text_of(pipeline.call(set_2, Clock::now() + 150ms, "SET 2")); });
  const Outcome second = two.get();
  const Outcome got_a = a.get();
  const Outcome got_b = b.get();
  EXPECT_EQ(got_a.value, "A");
  EXPECT_EQ(got_b.value, "B");
  EXPECT_GE(got_b.at_ms, 1300) << "B was not held behind A";
  for (const Outcome* unsent : {&first, &second}) {
    EXPECT_TRUE(unsent->timeout) << unsent->value;
    EXPECT_NE(unsent->value.find("not sent"), std::string::npos) << unsent->value;
  }
  EXPECT_LT(first.at_ms, 250 + 150 + 200) << "SET 1 was not failed at its deadline";
  EXPECT_LT(second.at_ms, 1000 + 150 + 200) << "SET 2 was not failed at its deadline";
  EXPECT_GE(pipeline.io_thread_batches(), 1u);
  // Unsent means never run: after every byte has passed, neither key exists.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(server.command({"EXISTS", "ap:io:unsent:1"}).integer, 0);
  EXPECT_EQ(server.command({"EXISTS", "ap:io:unsent:2"}).integer, 0);
}

// A request whose deadline passes while its reply is owed fails alone, at
// its deadline, typed; the connection stays up for the requests written
// with it, and its late reply reaches nobody. (Until session 8 the read
// bounded by D's deadline broke the connection and failed C with it.)
TEST(AutoPipelineIoThread, ShortDeadlineInFlightFailsAloneAndItsLateReplyReachesNobody) {
  RedisServer server;
  server.command({"SET", "ap:io:batch:a", "A"});
  server.command({"SET", "ap:io:batch:c", "C"});
  FaultProxy proxy("127.0.0.1", server.port());
  proxy.add_rule({.command = "GET", .action = FaultAction::delay, .delay = 800ms, .times = 2});
  Client client(pipelined_options(proxy.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  const std::array<std::string_view, 2> get_a{"GET", "ap:io:batch:a"};
  const std::array<std::string_view, 2> get_c{"GET", "ap:io:batch:c"};
  const std::array<std::string_view, 3> set_d{"SET", "ap:io:batch:d", "D"};
  const auto t0 = Clock::now();
  auto a = start(t0, [&] { return text_of(pipeline.call(get_a, Clock::now() + 5s, "GET a")); });
  std::this_thread::sleep_for(150ms);
  // C and D queue behind A's exchange and leave in one batch of the I/O
  // thread at ~800 ms; C's reply is held until ~1600 ms, D's behind it.
  auto c = start(t0, [&] { return text_of(pipeline.call(get_c, Clock::now() + 5s, "GET c")); });
  std::this_thread::sleep_for(100ms);
  const auto d_deadline_ms = ms_since(t0) + 1000;  // ~1250 ms: while the batch is in flight
  auto d = start(t0, [&] { return text_of(pipeline.call(set_d, Clock::now() + 1000ms, "SET d")); });
  const Outcome got_d = d.get();
  // D's reply ("OK") is still owed: the next caller must get its own.
  Outcome got_e;
  if (got_d.value.find("not sent") == std::string::npos)
    got_e = start(t0, [&] { return text_of(pipeline.call(get_a, Clock::now() + 5s, "GET a (E)")); }).get();
  const Outcome got_a = a.get();
  const Outcome got_c = c.get();
  EXPECT_EQ(got_a.value, "A");
  ASSERT_TRUE(got_d.timeout) << got_d.value;
  EXPECT_LT(got_d.at_ms, d_deadline_ms + 300) << "D was not failed at its own deadline";
  EXPECT_EQ(got_c.value, "C") << "C's request was failed by D's deadline";
  if (got_d.value.find("not sent") == std::string::npos) {
    // D was in flight with C (the usual case; "not sent" only when A's
    // exchange ended after D's deadline on a slow machine).
    EXPECT_NE(got_d.value.find("outcome unknown"), std::string::npos) << got_d.value;
    EXPECT_GE(got_c.at_ms, 1400) << "C's reply is held by the proxy until ~1600 ms";
    EXPECT_EQ(got_e.value, "A") << "E got the reply owed to D";
    EXPECT_GE(pipeline.io_thread_batches(), 1u);
  }
  for (int round = 0; round < 20; ++round) {
    EXPECT_EQ(text_of(pipeline.call(get_a, Clock::now() + 2s, "GET a")), "A");
    EXPECT_EQ(text_of(pipeline.call(get_c, Clock::now() + 2s, "GET c")), "C");
  }
}

// Callers with 5 ms deadlines share the connection with callers with 3 s
// ones while the server stalls for 60 ms at a time (DEBUG SLEEP on another
// connection): the short ones time out (alone), the long ones all succeed,
// and no reply ever reaches the wrong caller (each GET must return its
// own thread's last SET). With the old rule (one deadline breaks the
// connection for all in flight) the long callers failed by the hundred.
TEST(AutoPipelineIoThread, ShortDeadlinesFailAloneUnderStallsAndMisdeliverNothing) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kLong = 12, kShort = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> long_ok{0}, long_failed{0}, short_ok{0}, short_timeouts{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kLong + kShort; ++t)
    threads.emplace_back([&, t] {
      const bool short_deadline = t >= kLong;
      const std::string key = "ap:io:mixed:" + std::to_string(t);
      for (int i = 0; !stop.load() && i < 100000; ++i) {
        const auto deadline = Clock::now() + (short_deadline ? std::chrono::milliseconds(5) : std::chrono::milliseconds(3000));
        try {
          set_get(pipeline, key, std::to_string(i), deadline);
          ++(short_deadline ? short_ok : long_ok);
        } catch (const TimeoutError& e) {
          if (short_deadline) {
            ++short_timeouts;
          } else {
            ADD_FAILURE() << "a 3 s caller timed out: " << e.what();
            ++long_failed;
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << "thread " << t << ": " << e.what();  // misdelivered, or untyped
          ++wrong;
          return;
        }
      }
    });
  RawConnection staller = server.connect();
  for (int stall = 0; stall < 15; ++stall) {
    std::this_thread::sleep_for(40ms);
    staller.command({"DEBUG", "SLEEP", "0.06"});
  }
  std::this_thread::sleep_for(100ms);
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(long_failed.load(), 0);
  EXPECT_GT(long_ok.load(), 100);
  EXPECT_GT(short_timeouts.load(), 0) << "no short deadline passed in flight: the stalls did not bite";
  EXPECT_GT(pipeline.io_thread_batches(), 0u);
  std::printf("[auto-pipeline mixed deadlines] long ok %d, short ok %d, short timeouts %d\n", long_ok.load(),
              short_ok.load(), short_timeouts.load());
}

// A caller alone on the idle connection (its own exchange, no I/O thread)
// whose deadline passes while the server sleeps fails alone, and the
// connection is kept: its reply is read and dropped by the I/O thread, the
// next calls get their own replies on the same connection (same CLIENT ID:
// no reconnection, which a frozen server could not even answer). Until
// session 8 the caller's own exchange broke the connection at its deadline.
TEST(AutoPipelineIoThread, OwnExchangePastItsDeadlineKeepsTheConnection) {
  RedisServer server;
  server.command({"SET", "ap:io:own", "V"});
  Client client(pipelined_options(server.port(), 3000ms));
  Pipeline& pipeline = pipeline_of(client);
  const std::array<std::string_view, 2> client_id{"CLIENT", "ID"};
  const ReplyPtr id_before = pipeline.call(client_id, Clock::now() + 2s, "CLIENT ID");
  ASSERT_EQ(id_before->type, REDIS_REPLY_INTEGER);
  RawConnection sleeper = server.connect();
  std::thread sleep([&] { sleeper.command({"DEBUG", "SLEEP", "0.3"}); });
  std::this_thread::sleep_for(50ms);  // the server is asleep now
  const std::array<std::string_view, 2> get{"GET", "ap:io:own"};
  const auto started = Clock::now();
  bool timed_out = false;
  std::string message;
  try {
    static_cast<void>(pipeline.call(get, Clock::now() + 50ms, "GET"));
  } catch (const TimeoutError& e) {
    timed_out = true;
    message = e.what();
  }
  const long long took = ms_since(started);
  sleep.join();
  EXPECT_TRUE(timed_out);
  EXPECT_NE(message.find("outcome unknown"), std::string::npos) << message;
  EXPECT_LT(took, 50 + 150) << "not failed at its own deadline";
  for (int i = 0; i < 10; ++i) EXPECT_EQ(text_of(pipeline.call(get, Clock::now() + 2s, "GET")), "V");
  const ReplyPtr id_after = pipeline.call(client_id, Clock::now() + 2s, "CLIENT ID");
  ASSERT_EQ(id_after->type, REDIS_REPLY_INTEGER);
  EXPECT_EQ(id_after->integer, id_before->integer) << "the connection was dropped and made again";
}

}  // namespace
}  // namespace lockon::test
