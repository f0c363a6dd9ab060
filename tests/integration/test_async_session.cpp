// integration/test_async_session.cpp — AsyncClient::async_command refuses
// a command that would change the session of its shared pipelined
// connection (client/session_commands.hpp): `UNSUBSCRIBE a b` answered
// twice and put every later reply one request late (a waiter's "acquired"
// went to another waiter: two holders); SELECT moved every lock of the
// client to another database (found by review, session 18).
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class AsyncSession : public RedisTest {};

TEST_F(AsyncSession, SessionChangingCommandsAreRefusedAndTheStreamStaysInStep) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), server().url());
  const std::string name = key("lock");
  int refused = 0;
  bool first = false, second = true;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
             {"UNSUBSCRIBE", "a", "b"}, {"SELECT", "1"}, {"SUBSCRIBE", "x"}, {"MULTI"}, {"RESET"}}) {
      try {
        co_await client.async_command(args);
      } catch (const ConfigError&) {
        ++refused;
      }
    }
    AsyncLock one(client, name, LockOptions{.ttl = 10s});
    AsyncLock two(client, name, LockOptions{.ttl = 10s});
    first = co_await one.async_try_lock();
    second = co_await two.async_try_lock();
    if (first) co_await one.async_unlock();
  }));
  EXPECT_EQ(refused, 5);
  EXPECT_TRUE(first);
  EXPECT_FALSE(second) << "two holders of one key";
}

}  // namespace
}  // namespace lockon::test
