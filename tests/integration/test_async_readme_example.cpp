// integration/test_async_readme_example.cpp — README's async example, as
// written there (Async section), must return from io.run(): Asio's
// convention is that an io_context runs out of work once no operation is
// outstanding, and a user following the README should not need to know
// which background work a client keeps. A new user found that io.run()
// never returned once an AsyncClient existed (issue 35 §2).
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "lockon/async.hpp"
#include "lockon/async_locker.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

asio::awaitable<void> do_work() { co_return; }

class AsyncReadmeExample : public RedisTest {};

TEST_F(AsyncReadmeExample, IoRunReturnsOnceTheExampleIsDone) {
  const std::string url = server().url();
  const std::string name = key("orders:42");
  std::atomic<bool> finished{false};
  asio::io_context io;
  std::promise<void> returned;
  auto run_returned = returned.get_future();
  std::thread loop([&] {
    // --- README, Async (the URL and the names are the test's) ---
    lockon::AsyncClient client(io.get_executor(), url);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      lockon::AsyncLock lock(client, name);
      auto guard = co_await lockon::async_scoped(lock);
      co_await do_work();
      co_await guard.release();

      lockon::AsyncLocker locker(client, {.timeout = 10s, .key_prefix = key("p")});
      auto withdraw = locker.async_lock_on<0>("bank::withdraw",
          [&](std::string /*card*/, int /*amount*/) -> asio::awaitable<int> { co_return 0; });
      co_await withdraw("card-1", 100);
      finished = true;
      client.close();
    }, asio::detached);
    io.run();
    // --- end of the README's code ---
    returned.set_value();
  });
  const bool ended = run_returned.wait_for(15s) == std::future_status::ready;
  if (!ended) io.stop();  // bounded: the test ends either way
  loop.join();
  EXPECT_TRUE(finished.load()) << "the example's coroutine did not complete";
  EXPECT_TRUE(ended) << "io.run() did not return within 15 s of starting the example";
}

}  // namespace
}  // namespace lockon::test
