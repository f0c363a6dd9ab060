// integration/test_auto_pipeline_spin.cpp — the pipeline's I/O thread
// polls for owed replies before it sleeps (ConnectionOptions::reply_spin,
// src/client/pipeline.cpp poll_before_sleeping). Attacked: replies caught
// while polling still reach the right callers; a server stalled under
// traffic costs the I/O thread at most reply_spin of polling per reply
// awaited, not the stall; reply_spin = 0 never polls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "auto_pipeline_support.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Pipeline;
using detail::ReplyPtr;

// CPU time of this process's pipeline I/O threads (named "lockon-pipeline",
// pipeline.cpp), from /proc (clock ticks, 10 ms): other threads of the test
// process (left by earlier tests in the same run) do not count.
std::chrono::milliseconds pipeline_threads_cpu() {
  long long ticks = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "lockon-pipeline") continue;
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));  // from field 3, the state
    std::string field;
    long long utime = 0, stime = 0;
    for (int i = 3; i <= 13 && fields >> field; ++i) {
    }
    fields >> utime >> stime;  // fields 14 and 15
    ticks += utime + stime;
  }
  return std::chrono::milliseconds(ticks * 1000 / sysconf(_SC_CLK_TCK));
}

ConnectionOptions spin_options(int port, std::chrono::microseconds reply_spin) {
  ConnectionOptions options = pipelined_options(port, 5000ms);  // the 1 s stall below must not break it
  options.reply_spin = reply_spin;
  return options;
}

// Threads each SET then GET their own key until `stop`; a GET answering
// another thread's value (a reply handed to the wrong caller) counts.
struct Traffic {
  std::atomic<bool> stop{false};
  std::atomic<long long> calls{0};
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;

  void start(Pipeline& pipeline, int count, const std::string& prefix) {
    for (int t = 0; t < count; ++t)
      threads.emplace_back([this, &pipeline, t, prefix] {
        const std::string key = prefix + std::to_string(t);
        for (long long i = 0; !stop.load() && i < 1'000'000; ++i) {
          const std::string value = std::to_string(t) + ":" + std::to_string(i);
          try {
            const std::array<std::string_view, 3> set{"SET", key, value};
            pipeline.call(set, Clock::now() + 10s, "SET");
            const std::array<std::string_view, 2> get{"GET", key};
            if (text_of(pipeline.call(get, Clock::now() + 10s, "GET")) != value) ++wrong;
            calls += 2;
          } catch (const Error&) {
            ++errors;
          }
        }
      });
  }
  void finish() {
    stop = true;
    for (auto& thread : threads)
      if (thread.joinable()) thread.join();
  }
  ~Traffic() { finish(); }  // also after a failed ASSERT
};

// 16 threads' calls through `pipeline` until 4,000 were answered: every
// answer must be the caller's own and none may fail.
void expect_clean_traffic(Pipeline& pipeline, const std::string& prefix) {
  Traffic traffic;
  traffic.start(pipeline, 16, prefix);
  ASSERT_TRUE(eventually(10s, [&] { return traffic.calls.load() >= 4000; }));
  traffic.finish();
  EXPECT_EQ(traffic.wrong.load(), 0);
  EXPECT_EQ(traffic.errors.load(), 0);
  EXPECT_GT(pipeline.io_thread_batches(), 0u);
}

// The spin bound is generous so that sanitizer builds poll too.
TEST(AutoPipelineSpin, RepliesCaughtWhilePollingReachTheirCallers) {
  RedisServer server;
  Client client(spin_options(server.port(), 20ms));
  Pipeline& pipeline = pipeline_of(client);
  expect_clean_traffic(pipeline, "ap:spin:");
  EXPECT_GT(pipeline.replies_seen_polling(), 0u) << "the I/O thread never polled: the test would prove nothing";
}

// A server stall while 8 threads keep the I/O thread busy: it polls for at
// most reply_spin (20 ms) and then sleeps; its CPU time over the stall
// shows it (polling the whole stall: one core). The traffic goes
// through a proxy adding 1 ms each way, so that requests always find
// others in flight and the I/O thread (not a caller's own exchange) is the
// one awaiting replies when the stall begins; two stalls of 500 ms.
TEST(AutoPipelineSpin, AStalledServerCostsAtMostReplySpinOfPolling) {
  RedisServer server;
  FaultProxy proxy(server.host(), server.port());
  proxy.set_latency(1000us);
  Client client(spin_options(proxy.port(), 20ms));
  Pipeline& pipeline = pipeline_of(client);
  Traffic traffic;
  traffic.start(pipeline, 8, "ap:spin:stall:");
  ASSERT_TRUE(eventually(10s, [&] { return pipeline.io_thread_batches() > 100 && traffic.calls.load() > 400; }));
  RawConnection raw("127.0.0.1", server.port());
  for (int stall = 0; stall < 2; ++stall) {
    const auto cpu0 = pipeline_threads_cpu();
    const auto wall0 = Clock::now();
    raw.command({"DEBUG", "SLEEP", "0.5"});  // returns when the stall ends
    const auto cpu = pipeline_threads_cpu() - cpu0;
    EXPECT_GE(Clock::now() - wall0, 450ms);
    std::cout << "I/O thread CPU over a 500 ms stall: " << cpu.count() << " ms\n";
    EXPECT_LT(cpu, 150ms) << "I/O thread CPU over a 500 ms stall (#" << stall << ")";
    std::this_thread::sleep_for(50ms);
  }
  traffic.finish();
  EXPECT_EQ(traffic.wrong.load(), 0);
  EXPECT_EQ(traffic.errors.load(), 0);
}

TEST(AutoPipelineSpin, ZeroNeverPolls) {
  RedisServer server;
  Client client(spin_options(server.port(), 0us));
  Pipeline& pipeline = pipeline_of(client);
  expect_clean_traffic(pipeline, "ap:spin:off:");
  EXPECT_EQ(pipeline.replies_seen_polling(), 0u);
}

TEST(AutoPipelineSpin, NegativeReplySpinIsAConfigError) {
  ConnectionOptions options;
  options.reply_spin = -1us;
  EXPECT_THROW(Client{options}, ConfigError);
}

}  // namespace
}  // namespace lockon::test
