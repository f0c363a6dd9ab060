// integration/test_async_sentinel.cpp — the async client on a real Sentinel
// deployment (1 master, 1 replica, 3 sentinels): it reaches the master, and
// follows a failover under contention: blocking Lock processes and async
// coroutines exclude each other exactly before the switch and on the new
// master after it (counters exact), every error during the switch is typed,
// and the coroutines resume on the new master.
#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "async/async_client_impl.hpp"
#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kLock = "asentinel:lock";
const std::string kCounter = "asentinel:counter";

std::string to_ns(Clock::time_point t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

std::string switch_error_kind(const std::exception& e) {
  if (dynamic_cast<const ReadOnlyError*>(&e)) return "ReadOnlyError";
  if (dynamic_cast<const TlsError*>(&e)) return "TlsError";
  if (dynamic_cast<const ConnectError*>(&e)) return "ConnectError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const ClosedError*>(&e)) return "ClosedError";
  if (dynamic_cast<const LockError*>(&e)) return "LockError";
  if (dynamic_cast<const Error*>(&e)) return "Error";
  return typeid(e).name();
}

struct Tally {
  long long sections = 0;  // completed critical sections
  long long after_switch = 0;
  std::map<std::string, int> errors;
};

// `n` coroutines doing lock / GET / SET / unlock on kLock until `stop`;
// any error ends its coroutine (and is counted).
void contend(asio::io_context& io, AsyncClient& client, int n, Clock::time_point stop, Tally& tally) {
  int done = 0;
  for (int c = 0; c < n; ++c) {
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      for (int i = 0; i < 100000 && Clock::now() < stop; ++i) {
        AsyncLock lock(client, kLock, LockOptions{.ttl = 3s, .wait_poll_interval = 100ms});
        if (!co_await lock.async_try_lock_for(1s)) continue;
        std::vector<std::string> get{"GET", kCounter};
        const Reply value = co_await client.async_command(get);
        const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
        std::vector<std::string> set{"SET", kCounter, std::to_string(next)};
        co_await client.async_command(set);
        co_await lock.async_unlock();
        ++tally.sections;
      }
    }, [&](std::exception_ptr error) {
      if (error) {
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          ++tally.errors[switch_error_kind(e)];
        }
      }
      if (++done == n) io.stop();
    });
  }
  io.restart();
  io.run_for(stop - Clock::now() + 30s);
  EXPECT_EQ(done, n) << "every coroutine ended";
}

// Two blocking-Lock processes and 10 coroutines in the same window: the
// counter on `server` grows by exactly the sections both sides counted.
void exact_window(asio::io_context& io, AsyncClient& client, const std::string& url, RedisServer& server,
                  const char* what) {
  const auto raw = server.command({"GET", kCounter});
  const long long base = raw.is_nil() ? 0 : std::stoll(raw.str);
  const auto start = Clock::now() + 300ms;
  const auto stop = start + 1200ms;
  std::vector<Child> workers;
  for (int w = 0; w < 2; ++w)
    workers.push_back(spawn(worker_argv("contend", {url, kCounter, kLock, to_ns(start), to_ns(stop)})));
  Tally tally;
  contend(io, client, 10, stop, tally);
  EXPECT_TRUE(tally.errors.empty()) << what << ": " << tally.errors.begin()->first;
  long long sync_sections = 0;
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(60s);
    ASSERT_TRUE(result.succeeded()) << what << ": " << result.describe();
    const auto at = result.out.find("count ");
    ASSERT_NE(at, std::string::npos) << result.out;
    sync_sections += std::stoll(result.out.substr(at + 6));
  }
  EXPECT_GT(tally.sections, 0) << what;
  EXPECT_GT(sync_sections, 0) << what;
  const auto after = server.command({"GET", kCounter});
  const bool exact = after.str == std::to_string(base + sync_sections + tally.sections);
  EXPECT_TRUE(exact) << what << ": counter " << after.str << " - " << base << " != sync " << sync_sections
                     << " + async " << tally.sections;
  std::printf("[async sentinel] %s: %lld sync + %lld async sections, counter %s\n", what, sync_sections,
              tally.sections, exact ? "exact" : "WRONG");
}

TEST(AsyncSentinel, ReachesTheMasterAndLocks) {
  SentinelSet set;
  asio::io_context io;
  AsyncClient client(io.get_executor(), set.url(kShortTimeouts));
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> args3{"SET", "asentinel:probe", "1"};
    co_await client.async_command(args3);
    AsyncLock lock(client, "asentinel:k");
    co_await lock.async_lock();
    EXPECT_TRUE(lock.held());
    co_await lock.async_unlock();
  }));
  EXPECT_EQ(set.master().command({"GET", "asentinel:probe"}).str, "1") << "written on the master";
}

TEST(AsyncSentinel, UnknownMasterNameIsConnectErrorNamingIt) {
  SentinelSet set;
  asio::io_context io;
  std::string url = set.url(kShortTimeouts);
  url = url.substr(0, url.find('#')) + "#nosuchmaster";
  AsyncClient client(io.get_executor(), url);
  bool typed = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      std::vector<std::string> args4{"PING"};
      co_await client.async_command(args4);
    } catch (const ConnectError& e) {
      typed = std::string(e.what()).find("nosuchmaster") != std::string::npos;
    }
  }));
  EXPECT_TRUE(typed);
}

// Applies `fault` 500 ms in, with 10 coroutines contending through it until
// the sentinels agree on a new master and 4 s more; checks every error is
// typed and the coroutines resumed. Returns the new master's port.
int contend_through_switch(SentinelSet& set, asio::io_context& io, AsyncClient& client, int old_port,
                           const std::function<void()>& fault, const char* what) {
  // The switch, with coroutines contending through it.
  std::atomic<Clock::rep> switched_ticks{0};  // written by the failover thread
  const auto switched = [&] { return Clock::time_point(Clock::duration(switched_ticks.load())); };
  Tally during;
  const auto fault_at = Clock::now() + 500ms;
  int new_port = 0;
  std::thread failover([&] {
    std::this_thread::sleep_until(fault_at);
    fault();
    new_port = set.wait_for_new_master(old_port, 30s);
    switched_ticks = Clock::now().time_since_epoch().count();
  });
  // Runs until the sentinels agree and 4 s more (bounded: 40 s).
  {
    int done = 0;
    const auto give_up = Clock::now() + 40s;
    const int n = 10;
    for (int c = 0; c < n; ++c) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 100000 && Clock::now() < give_up; ++i) {
          if (switched_ticks.load() != 0 && Clock::now() > switched() + 4s) break;
          try {
            AsyncLock lock(client, kLock, LockOptions{.ttl = 3s, .wait_poll_interval = 100ms});
            if (!co_await lock.async_try_lock_for(1s)) continue;
            std::vector<std::string> args5{"GET", kCounter};
            const Reply value = co_await client.async_command(args5);
            const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
            std::vector<std::string> args6{"SET", kCounter, std::to_string(next)};
            co_await client.async_command(args6);
            co_await lock.async_unlock();
            ++during.sections;
            if (switched_ticks.load() != 0 && Clock::now() > switched()) ++during.after_switch;
            continue;
          } catch (const std::exception& e) {
            ++during.errors[switch_error_kind(e)];
          }
          co_await sleep_for(20ms);  // back off while the switch lasts
        }
      }, [&](std::exception_ptr error) {
        if (error) ++during.errors["escaped"];
        if (++done == n) io.stop();
      });
    }
    io.restart();
    io.run_for(45s);
    EXPECT_EQ(done, n);
  }
  failover.join();
  EXPECT_NE(new_port, 0) << "no failover:\n" << set.logs();
  EXPECT_NE(new_port, old_port);
  std::string errors;
  for (const auto& [kind, count] : during.errors) {
    errors += kind + "=" + std::to_string(count) + " ";
    EXPECT_TRUE(kind == "ReadOnlyError" || kind == "ConnectError" || kind == "TimeoutError" ||
                kind == "ClosedError" || kind == "LockError")
        << kind << " x" << count;
  }
  std::printf("[async sentinel] %s: %lld sections during the switch (%lld in the 4 s after the sentinels agreed), errors: %s\n",
              what, during.sections, during.after_switch, errors.c_str());
  EXPECT_GT(during.after_switch, 0) << "the coroutines resumed on the new master";
  EXPECT_GE(client.impl()->switches(), 1u);

  return new_port;
}

TEST(AsyncSentinel, FailoverUnderContentionWithBlockingProcesses) {
  SentinelSet set;
  const int old_port = set.master_port_by_sentinel();
  ASSERT_NE(old_port, 0);
  asio::io_context io;
  const std::string url = set.url(kShortTimeouts);
  AsyncClient client(io.get_executor(), url);
  exact_window(io, client, url, set.master(), "before the failover");
  const int new_port = contend_through_switch(
      set, io, client, old_port,
      [&] { EXPECT_TRUE(set.sentinel_command({"SENTINEL", "FAILOVER", SentinelSet::kMasterName}).is("OK")); },
      "SENTINEL FAILOVER");
  ASSERT_NE(new_port, 0);
  ASSERT_NE(new_port, old_port);
  // After the switch: the same AsyncClient and new blocking processes
  // exclude each other exactly on the new master.
  exact_window(io, client, url, set.server_on(new_port), "after the failover");
}

// The master dies (SIGKILL): the client sees I/O errors (typed), resolves
// again, and follows the sentinels to the promoted replica.
TEST(AsyncSentinel, MasterKilledUnderContentionFailsOverAndRecovers) {
  SentinelSet set;
  const int old_port = set.master_port_by_sentinel();
  ASSERT_NE(old_port, 0);
  asio::io_context io;
  const std::string url = set.url(kShortTimeouts);
  AsyncClient client(io.get_executor(), url);
  const int new_port =
      contend_through_switch(set, io, client, old_port, [&] { set.master().kill(); }, "SIGKILL master");
  ASSERT_NE(new_port, 0);
  ASSERT_NE(new_port, old_port);
  exact_window(io, client, url, set.server_on(new_port), "after the master was killed");
}

}  // namespace
}  // namespace lockon::test
