// integration/test_async_cleanup_schedule.cpp — the Asio front's clean-up of
// an abandoned attempt runs on the blocking front's schedule
// (protocol/cleanup_schedule.hpp): retried until it runs (not given up
// after 12 tries, ~25 s, as before), then, the outcome being unknown, swept
// again 50 ms, 1 s and 5 s after its first success.
#include <asio/io_context.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "integration/release_faults_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "protocol/cleanup_schedule.hpp"
#include "protocol/lock_scripts.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncCleanupSchedule : public RedisTest {};

TEST_F(AsyncCleanupSchedule, ARefusedReleaseIsCleanedUpPastTheOldBudgetThenSweptThreeTimes) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 30s});
  // 14 refusals: the old schedule gave up after 12 tries (K then held for
  // its TTL); this one makes them in ~2.8 s (20 ms doubling to 250 ms).
  constexpr int kRefusals = 14;
  int release_refused = -1;
  const std::string cancel_sha = detail::scripts::cancel_wait(false).sha();
  const int cancel_refused = refuse_script(proxy, detail::scripts::cancel_wait(false), kRefusals);
  const int cancel_ran = proxy.add_rule({.command = "EVALSHA", .argument_contains = cancel_sha});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock_for(1s));
    release_refused = refuse_script(proxy, detail::scripts::release());
    co_await lock.async_unlock();
  }));
  ASSERT_EQ(proxy.matched(release_refused), 1u) << "the release was not the one refused: the test proved nothing";
  ASSERT_TRUE(lock.lost());
  const auto step = [&] {
    io.restart();
    io.run_for(10ms);
  };
  const auto until = Clock::now() + 8s;
  while (Clock::now() < until && server().command({"EXISTS", name}).integer != 0) step();
  const auto freed_at = Clock::now();
  EXPECT_EQ(proxy.matched(cancel_refused), static_cast<std::size_t>(kRefusals));
  ASSERT_EQ(server().command({"EXISTS", name}).integer, 0)
      << "K stays held by a token nobody holds after " << proxy.matched(cancel_refused) << " refused clean-ups";
  // The sweeps: the first run and three more, the last ~5 s after it.
  const auto last_sweep = freed_at + detail::CleanupSchedule::kSweepsAfterSuccess.back();
  while (Clock::now() < last_sweep + 1500ms && proxy.matched(cancel_ran) < 4) step();
  EXPECT_EQ(proxy.matched(cancel_ran), 1u + detail::CleanupSchedule::kSweepsAfterSuccess.size());
  // And no more after them: the clean-up ended.
  for (int i = 0; i < 20; ++i) step();
  EXPECT_EQ(proxy.matched(cancel_ran), 1u + detail::CleanupSchedule::kSweepsAfterSuccess.size());
}

// Retried for up to 10 minutes, a clean-up would keep io.run() from
// returning after its server is gone: close() ends it (docs/async.md).
TEST_F(AsyncCleanupSchedule, CloseEndsTheCleanUpsSoIoRunReturns) {
  FaultProxy proxy(server().host(), server().port());
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = key("lock");
  AsyncLock lock(client, name, LockOptions{.ttl = 30s});
  const int cancel_refused = refuse_script(proxy, detail::scripts::cancel_wait(false), -1);
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await lock.async_try_lock_for(1s));
    refuse_script(proxy, detail::scripts::release());
    co_await lock.async_unlock();
  }));
  ASSERT_TRUE(lock.lost());
  // The clean-up is at work: refused, retried.
  for (int i = 0; i < 200 && proxy.matched(cancel_refused) < 3; ++i) {
    io.restart();
    io.run_for(10ms);
  }
  ASSERT_GE(proxy.matched(cancel_refused), 3u);
  client.close();
  io.restart();
  const auto started = Clock::now();
  std::thread watchdog([&] {
    // A bound, not the assertion: io.run() must end by itself long before.
    for (int i = 0; i < 100 && !io.stopped(); ++i) std::this_thread::sleep_for(50ms);
    io.stop();
  });
  io.run();
  const auto took = Clock::now() - started;
  watchdog.join();
  EXPECT_LT(took, 1s) << "io.run() was kept busy by the closed client's clean-up";
  const auto refused_at_close = proxy.matched(cancel_refused);
  io.restart();
  io.run_for(600ms);
  EXPECT_EQ(proxy.matched(cancel_refused), refused_at_close) << "the clean-up went on after close()";
}

}  // namespace
}  // namespace lockon::test
