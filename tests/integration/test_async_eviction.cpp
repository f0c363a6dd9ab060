// integration/test_async_eviction.cpp — AsyncLock tells the operator, once
// per server and process, that the server may evict a held lock (any
// maxmemory-policy but noeviction; README "Guarantees"), like the blocking
// Lock does (test_eviction.cpp): its first auto-renewed acquisition on a
// server asks CONFIG GET maxmemory maxmemory-policy on a coroutine of its
// own, bounded by 300 ms. Attacked: a server that may not be asked, and a
// CONFIG answer that comes after the check gave up, on the connection the
// renewals share (its late reply must reach nobody).
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "integration/async_support.hpp"
#include "integration/warning_log.hpp"
#include "lockon/async.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string topic_of(const std::string& host, int port) { return "eviction:" + host + ":" + std::to_string(port); }

// Waits on the executor (the check runs there) until `done` or `limit`.
template <class Done>
asio::awaitable<bool> wait_for(Done done, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= until) co_return false;
    timer.expires_after(5ms);
    co_await timer.async_wait(asio::use_awaitable);
  }
  co_return true;
}

bool config_asked(RedisServer& server) {
  return server.command({"INFO", "commandstats"}).str.find("cmdstat_config|get:") != std::string::npos;
}

TEST(AsyncEviction, AServerThatMayEvictIsReportedOnceWhenAnAutoRenewedLockIsTakenThere) {
  WarningLog warnings;
  RedisServer server({.extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}});
  asio::io_context io;
  AsyncClient client(io.get_executor(), server.url());
  const std::string topic = topic_of(server.host(), server.port());
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, "evict:async", {.ttl = 30s, .token = std::string("secret-token-0123456789")});
    co_await lock.async_lock();
    EXPECT_TRUE(co_await wait_for([&] { return !warnings.about(topic).empty(); }, 3000ms))
        << "no warning for " << topic;
    co_await lock.async_unlock();
    // Once per server and process: more locks there say nothing more.
    for (int i = 0; i < 3; ++i) {
      AsyncLock again(client, "evict:async:" + std::to_string(i), {.ttl = 30s});
      co_await again.async_lock();
      co_await again.async_unlock();
    }
    co_await wait_for([] { return false; }, 200ms);
  }));
  ASSERT_EQ(warnings.about(topic).size(), 1u);
  const std::string message = warnings.about(topic).front().second;
  EXPECT_NE(message.find("maxmemory-policy allkeys-lru"), std::string::npos) << message;
  EXPECT_NE(message.find("104857600"), std::string::npos) << message;
  EXPECT_NE(message.find("noeviction"), std::string::npos) << message;
  EXPECT_EQ(message.find("secret-token"), std::string::npos) << message;
}

TEST(AsyncEviction, NoWarningWhenTheServerCannotEvictOrMayNotBeAsked) {
  WarningLog warnings;
  RedisServer noeviction({.extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}});
  RedisServer restricted({.acl_users = {"app on >app-pass ~* &* +@all -config"},
                          .extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}});
  struct Case {
    RedisServer* server;
    std::string url;
    const char* what;
  };
  const std::vector<Case> cases{
      {&noeviction, noeviction.url(), "noeviction"},
      {&restricted, "redis://app:app-pass@" + restricted.host() + ":" + std::to_string(restricted.port()),
       "a user without +config"}};
  for (const Case& c : cases) {
    asio::io_context io;
    AsyncClient client(io.get_executor(), c.url);
    ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
      AsyncLock lock(client, "evict:async:quiet", {.ttl = 30s});
      co_await lock.async_lock();
      // The check ran (the server served, or refused, a CONFIG GET)...
      EXPECT_TRUE(co_await wait_for([&] { return config_asked(*c.server); }, 3000ms))
          << c.what << ": the check never reached the server";
      co_await wait_for([] { return false; }, 50ms);
      EXPECT_TRUE(lock.held() && !lock.lost()) << c.what;
      co_await lock.async_unlock();
      EXPECT_EQ(lock.last_unlock_error(), nullptr) << c.what;
    })) << c.what;
    // ...and said nothing.
    const std::string topic = topic_of(c.server->host(), c.server->port());
    EXPECT_TRUE(warnings.about(topic).empty()) << c.what << ": " << warnings.about(topic).front().second;
  }
}

// Attacks: CONFIG GET answered 500 ms late (a proxy delay rule: what is
// behind it on the connection waits too, as on any network), past the
// check's 300 ms. The check gives up and says nothing; the late answer must
// not be taken for the reply of what came after it on the shared connection
// (ECHOs, the renewals, the release), and the lease is kept. Sabotage: a
// check deadline of 2 s warned from the late reply (caught by the last line).
TEST(AsyncEviction, LateConfigAnswerWarnsNothingAndReachesNobody) {
  WarningLog warnings;
  RedisServer server({.extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}});
  FaultProxy proxy(server.host(), server.port());
  const int config = proxy.add_rule({.command = "CONFIG", .action = FaultAction::delay, .delay = 500ms});
  asio::io_context io;
  AsyncClient client(io.get_executor(), proxy.url());
  const std::string name = unique_key("async-late-config");
  int wrong = 0, echoes = 0;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    AsyncLock lock(client, name, {.ttl = 1500ms});
    co_await lock.async_lock();
    asio::steady_timer timer(co_await asio::this_coro::executor);
    const auto until = Clock::now() + 2s;  // the late answer and three renewals
    for (int i = 0; i < 1000 && Clock::now() < until; ++i) {
      const std::string text = "echo-" + std::to_string(i);
      std::vector<std::string> args{"ECHO", text};  // (not braced inside co_await: GCC 12)
      const Reply echoed = co_await client.async_command(std::move(args));
      if (echoed.as_string() != text) ++wrong;
      ++echoes;
      if (!lock.held() || lock.lost()) ++wrong;
      timer.expires_after(20ms);
      co_await timer.async_wait(asio::use_awaitable);
    }
    EXPECT_GT(server.command({"PTTL", name}).integer, 0) << "the key expired: renewals stopped";
    co_await lock.async_unlock();
    EXPECT_EQ(lock.last_unlock_error(), nullptr);
  }));
  EXPECT_GE(proxy.matched(config), 1u) << "the check never asked";
  EXPECT_EQ(wrong, 0) << "of " << echoes << " echoes";
  EXPECT_GT(echoes, 20);
  EXPECT_EQ(warnings.count(topic_of(proxy.host(), proxy.port())), 0u) << "a warning from a reply that came too late";
}

}  // namespace
}  // namespace lockon::test
