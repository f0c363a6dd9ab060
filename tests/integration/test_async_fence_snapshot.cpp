// integration/test_async_fence_snapshot.cpp — AsyncLock's fences after the
// fence counter came back stale (the server reloaded an older snapshot):
// each must exceed every fence handed out before (test_fence_snapshot.cpp
// has the blocking Lock's case; session 17).
#include <asio/io_context.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

TEST(AsyncFenceSnapshot, FencesAfterAStaleCounterExceedEveryEarlierOne) {
  RedisServer own;
  asio::io_context io;
  AsyncClient client(io.get_executor(), own.url());
  AsyncLock lock(client, "k", LockOptions{.ttl = 10s, .fencing = true});
  std::vector<std::uint64_t> fences;
  const auto cycles = [&](int count) {
    return run_on(io, [&]() -> asio::awaitable<void> {
      for (int i = 0; i < count; ++i) {
        const bool got = co_await lock.async_try_lock();
        EXPECT_TRUE(got);
        if (!got) co_return;
        fences.push_back(lock.fence());
        co_await lock.async_unlock();
      }
    });
  };
  ASSERT_TRUE(cycles(1));
  ASSERT_TRUE(own.command({"SAVE"}).is("OK"));
  ASSERT_TRUE(cycles(3));
  const std::uint64_t before = fences.back();
  ASSERT_TRUE(own.command({"DEBUG", "RELOAD", "NOSAVE"}).is("OK"));
  ASSERT_TRUE(cycles(3));
  ASSERT_EQ(fences.size(), 7u);
  for (std::size_t i = 4; i < fences.size(); ++i)
    EXPECT_GT(fences[i], i == 4 ? before : fences[i - 1]) << "fence " << fences[i] << " repeats or precedes an earlier one";
}

}  // namespace
}  // namespace lockon::test
