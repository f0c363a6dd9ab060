// integration/test_async_custom_token_cleanup.cpp — AsyncLock with a custom
// token: the background clean-up of an earlier attempt (retried with
// back-off while the server stalls) must not release a later acquisition
// with the same token. Before session 17 its next retry deleted the new
// holder's key: two holders (found by review; test_custom_token_cleanup.cpp
// has the blocking Lock's cases).
#include <asio/io_context.hpp>

#include <chrono>
#include <string>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class AsyncCustomTokenCleanup : public RedisTest {
 protected:
  asio::io_context io;
};

TEST_F(AsyncCustomTokenCleanup, AStalledAttemptsCleanUpDoesNotReleaseTheNextAcquisition) {
  RedisServer own;
  ConnectionOptions options = ConnectionOptions::from_url(own.url());
  options.socket_timeout = 200ms;
  AsyncClient client(io.get_executor(), options);
  const std::string name = "k";
  const std::string token = "custom-token-async";
  AsyncLock lock(client, name, LockOptions{.ttl = 10s, .token = token});
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    std::vector<std::string> ping{"PING"};
    co_await client.async_command(ping);  // connected
  }));
  own.pause();
  bool acquired = true;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { acquired = co_await lock.async_try_lock_for(100ms); }));
  ASSERT_FALSE(acquired);
  // The clean-up's first two tries time out (at +200 ms and +500 ms); its
  // third is due at +700 ms. The server resumes between them, and the
  // lock is taken again at once.
  drain(io, 600ms);
  own.resume();
  bool again = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { again = co_await lock.async_try_lock_for(1s); }));
  ASSERT_TRUE(again) << "the key was not taken again";
  const auto start = Clock::now();
  long long lost_after = -1;
  while (Clock::now() - start < 3000ms && lost_after < 0) {
    drain(io, 20ms);
    const RawReply value = own.command({"GET", name});
    if (value.is_nil() || value.str != token) lost_after = ms_since(start);
  }
  EXPECT_EQ(lost_after, -1) << "the earlier attempt's clean-up released the new acquisition";
  EXPECT_TRUE(lock.held());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> { co_await lock.async_unlock(); }));
  EXPECT_EQ(own.command({"EXISTS", name}).integer, 0);
}

}  // namespace
}  // namespace lockon::test
