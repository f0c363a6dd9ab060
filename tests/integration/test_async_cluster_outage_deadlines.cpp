// integration/test_async_cluster_outage_deadlines.cpp — issue 33 §4 on the
// async front: async_try_lock_for on a Redis Cluster keeps its deadline
// while a master is frozen (SIGSTOP), before its replica is promoted and
// after; and the client still follows the failover when every caller's
// deadline is short. The blocking twin: test_cluster_outage_deadlines.cpp;
// margins: cluster_outage_support.hpp.
#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/use_future.hpp>

#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "cluster_outage_support.hpp"
#include "cluster_test_fixture.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/paused_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncClusterOutageDeadlines : public ClusterTest {};

// Eight coroutines on one io_context thread, each a loop of
// async_try_lock_for(200 ms) on keys of the frozen master and of the others
// (they contend: some attempts queue). Every call completes within
// 200 + 250 ms, with true, false or a lockon error; after the promotion a
// key of the frozen master's slots can be locked again.
TEST_F(AsyncClusterOutageDeadlines, TimedLocksKeepTheirDeadlineWhileAMasterIsFrozen) {
  const auto masters = cluster().masters();
  ASSERT_EQ(masters.size(), 3u);
  RedisServer& victim = *first_asked(masters);  // the worst case: every map read asks it first
  RedisServer& replica = cluster().replica_of(victim);
  std::vector<RedisServer*> others;
  for (RedisServer* master : masters)
    if (master != &victim) others.push_back(master);
  std::vector<std::string> victim_names;
  std::vector<std::string> other_names;
  for (int i = 0; i < 3; ++i) victim_names.push_back(name_on(victim, "async-outage-v" + std::to_string(i)));
  for (int i = 0; i < 3; ++i) other_names.push_back(name_on(*others[i % 2], "async-outage-o" + std::to_string(i)));

  constexpr auto kWait = 200ms;
  OutageTally tally(kWait);  // outlives the loop (declared before it)
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::jthread runner([&] { io.run(); });
  struct StopLoop {
    asio::io_context& io;
    decltype(work)& guard;
    std::jthread& runner;
    ~StopLoop() {
      guard.reset();
      io.stop();
      if (runner.joinable()) runner.join();
    }
  };
  std::atomic<bool> stop{false};
  std::atomic<int> running{0};
  std::optional<AsyncClient> client;
  client.emplace(io.get_executor(), cluster().url());
  const StopLoop stop_loop{io, work, runner};  // before the client goes: its clean-ups never outlive the test's scope

  // A timed attempt; "acquired", "false" or the error's class (and text).
  const auto attempt = [&](std::string name, std::chrono::milliseconds wait, OutageTally* into,
                           bool on_victim) -> asio::awaitable<bool> {
    AsyncLock lock(*client, name);
    const auto start = Clock::now();
    bool got = false;
    std::string outcome;
    std::string detail;
    try {
      got = co_await lock.async_try_lock_for(wait);
      outcome = got ? "acquired" : "false";
    } catch (const Error& e) {
      outcome = typeid(e).name();
      detail = e.what();
    } catch (const std::exception& e) {
      if (into != nullptr) into->record_untyped(e.what());
      co_return false;
    }
    if (into != nullptr) into->record(on_victim, ms_since(start), outcome, detail);
    if (got) co_await lock.async_unlock();
    co_return got;
  };
  const auto run = [&](auto make) { return asio::co_spawn(io, make(), asio::use_future).get(); };

  // Warm-up: the map read and every master reached.
  for (const auto* names : {&victim_names, &other_names})
    for (const std::string& name : *names) ASSERT_TRUE(run([&] { return attempt(name, 2s, nullptr, false); })) << name;

  {
    PausedServer paused(victim);  // SIGCONT however the test ends
    for (int index = 0; index < 8; ++index) {
      ++running;
      asio::co_spawn(
          io,
          [&, index]() -> asio::awaitable<void> {
            for (std::size_t i = static_cast<std::size_t>(index); !stop; ++i) {
              const bool on_victim = i % 2 == 0;
              const auto& names = on_victim ? victim_names : other_names;
              co_await attempt(names[(i / 2) % names.size()], kWait, &tally, on_victim);
            }
          },
          [&](std::exception_ptr) { --running; });
    }
    const long long promoted_ms = wait_promoted(replica, 15s);
    std::this_thread::sleep_for(promoted_ms >= 0 ? 2s : 0ms);
    stop = true;
    EXPECT_TRUE(eventually(10s, [&] { return running.load() == 0; })) << "coroutines still running 10 s after stop";
    std::cout << "replica promoted " << promoted_ms << " ms after the freeze\n";
    ASSERT_GE(promoted_ms, 0) << "the frozen master's replica was not promoted in 15 s";
    // Still frozen: the client followed the failover (short deadlines only).
    bool relocked = false;
    const auto start = Clock::now();
    while (!relocked && ms_since(start) < 10'000)
      relocked = run([&] { return attempt(victim_names[0], 200ms, nullptr, true); });
    EXPECT_TRUE(relocked) << "no lock on the frozen master's slots 10 s after its replica's promotion";
  }
  std::cout << tally.summary() << "\n";
  EXPECT_EQ(tally.overruns(), 0) << tally.summary();
  EXPECT_EQ(tally.untyped(), 0) << tally.summary();
  EXPECT_GT(tally.victim_attempts(), 0);
  EXPECT_GT(tally.acquired(), 0) << "nothing was locked during the outage, not even on the live masters";
}

}  // namespace
}  // namespace lockon::test
