// integration/test_async_wrong_deployment.cpp — the async front's errors for
// a URL naming the wrong kind of deployment, echoed arguments and names over
// the limit (issue 33, §5; the blocking twin: test_wrong_deployment.cpp and
// test_name_limit.cpp). The rules are the blocking front's, in
// src/client/error_map.* and server_version.* and lockon/name.hpp.
//
// Before: an AsyncLock on `redis://` at a Cluster node threw ServerBusyError
// ("the key's hash slot kept moving"); at a Sentinel, ReplyError with the
// lock token in its message; a 32 MiB name made async_try_lock_for(2s)
// return after 7.4-8.3 s.
#include <asio/io_context.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <typeinfo>

#include "integration/async_support.hpp"
#include "integration/cluster_test_fixture.hpp"
#include "lockon/async.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kSecretToken = "tok-SECRET-async-8e21c4d09b7a";

std::string deployment_error_class(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const ServerBusyError*>(&e)) return "ServerBusyError";
  if (dynamic_cast<const ReplyError*>(&e)) return "ReplyError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  return typeid(e).name();
}

std::string redis_url(int port) { return "redis://127.0.0.1:" + std::to_string(port); }

// async_try_lock on `name` through `url`: must throw E whose message has
// each of `parts` and never the token. Returns how long it took.
template <class E>
Clock::duration expect_try_lock_error(const std::string& url, const std::string& name,
                                      std::initializer_list<std::string> parts) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), url);
  const auto start = Clock::now();
  EXPECT_TRUE(run_on(
      io,
      [&]() -> asio::awaitable<void> {
        AsyncLock lock(client, name, LockOptions{.token = kSecretToken});
        try {
          co_await lock.async_try_lock();
          ADD_FAILURE() << "no error";
        } catch (const E& e) {
          const std::string message = e.what();
          for (const std::string& part : parts) EXPECT_TRUE(contains(message, part)) << part << " in: " << message;
          EXPECT_FALSE(contains(message, kSecretToken)) << "the token leaked: " << message;
        } catch (const std::exception& e) {
          ADD_FAILURE() << "wrong class: " << deployment_error_class(e) << ": " << e.what();
        }
        EXPECT_FALSE(lock.held());
      },
      20s));
  return Clock::now() - start;
}

class AsyncRedisUrlAtClusterNode : public ClusterTest {};

TEST_F(AsyncRedisUrlAtClusterNode, LockOnAKeyOfAnotherNodeIsAConfigErrorNamingRedisCluster) {
  const auto masters = cluster().masters();
  ASSERT_GE(masters.size(), 2u);
  const auto took = expect_try_lock_error<ConfigError>(redis_url(masters[0]->port()), name_on(*masters[1], "lock"),
                                                       {"Cluster node", "redis-cluster://"});
  EXPECT_LT(took, 5s);
  // A key of that node still locks (only a redirection proves the URL wrong).
  asio::io_context io;
  AsyncClient client(io.get_executor(), redis_url(masters[0]->port()));
  ASSERT_TRUE(run_on(
      io,
      [&]() -> asio::awaitable<void> {
        AsyncLock own(client, name_on(*masters[0], "own"));
        EXPECT_TRUE(co_await own.async_try_lock());
        co_await own.async_unlock();
      },
      20s));
}

TEST(AsyncRedisUrlAtSentinel, LockIsAConfigErrorNamingRedisSentinelWithoutTheToken) {
  SentinelSet sentinels;
  const auto took = expect_try_lock_error<ConfigError>(redis_url(sentinels.sentinel_port(0)), unique_key("lock"),
                                                       {"Sentinel", "redis-sentinel://"});
  EXPECT_LT(took, 5s);
  // The same sentinels behind redis-sentinel:// still lock (their own
  // connections expect a Sentinel).
  asio::io_context io;
  AsyncClient client(io.get_executor(), sentinels.url());
  ASSERT_TRUE(run_on(
      io,
      [&]() -> asio::awaitable<void> {
        AsyncLock lock(client, unique_key("via-sentinel"));
        EXPECT_TRUE(co_await lock.async_try_lock());
        co_await lock.async_unlock();
      },
      20s));
}

TEST(AsyncEchoedArguments, AnUnknownSetNeverPutsTheTokenInTheError) {
  RedisServer server({.extra_args = {"--rename-command", "SET", "SET-renamed-by-lockon-test"}});
  expect_try_lock_error<ReplyError>(server.url(), unique_key("lock"), {"unknown command", "withheld"});
}

TEST(AsyncNameLimit, ANameOverTheLimitIsRefusedAtConstruction) {
  asio::io_context io;
  AsyncClient client(io.get_executor(), shared_server().url());
  for (const std::size_t bytes : {kMaxNameBytes + 1, std::size_t{32} << 20}) {
    std::string name = unique_key("over");
    name.resize(bytes, 'x');
    const auto start = Clock::now();
    try {
      AsyncLock lock(client, name);
      ADD_FAILURE() << "a " << bytes << "-byte name was accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), std::to_string(kMaxNameBytes))) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 1024u) << "the message carries the name";
    }
    EXPECT_LT(Clock::now() - start, 2s);
  }
  // Exactly the limit: a lock cycle within a 2 s wait, well inside it.
  std::string name = unique_key("max");
  name.resize(kMaxNameBytes, 'x');
  const auto start = Clock::now();
  ASSERT_TRUE(run_on(
      io,
      [&]() -> asio::awaitable<void> {
        AsyncLock lock(client, name);
        EXPECT_TRUE(co_await lock.async_try_lock_for(2s));
        co_await lock.async_unlock();
      },
      20s));
  EXPECT_LT(Clock::now() - start, 4s);
}

}  // namespace
}  // namespace lockon::test
