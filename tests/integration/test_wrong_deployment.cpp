// integration/test_wrong_deployment.cpp — a URL that names the wrong kind of
// deployment, and servers that echo a request's arguments (issue 33, §5),
// blocking front (the async twin: test_async_wrong_deployment.cpp).
//
// - `redis://` at a Redis Cluster node: a key of another node's slot used to
//   give ServerBusyError "the key's hash slot kept moving (last answer:
//   MOVED ...)", a retryable class for a wrong URL. Now ConfigError naming
//   redis-cluster://.
// - `redis://` at a Sentinel: the SET failed with ReplyError "ERR unknown
//   command 'SET', with args beginning with: '<key>' '<token>' ..." — the
//   lock token in the message. Now ConfigError naming redis-sentinel://
//   (HELLO's mode), and the token nowhere.
// - A server where SET is unknown (renamed away: the same reply as a
//   Sentinel's): the ReplyError stays, its echoed arguments withheld.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <typeinfo>

#include "integration/cluster_test_fixture.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A custom token easy to look for in messages.
const std::string kSecretToken = "tok-SECRET-5f3a9c0e1d7b42a8";

std::string deployment_error_class(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const ServerBusyError*>(&e)) return "ServerBusyError";
  if (dynamic_cast<const ReplyError*>(&e)) return "ReplyError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  return typeid(e).name();
}

// Runs `attempt`, which must throw ConfigError whose message contains each
// of `parts` and never kSecretToken; returns how long it took.
template <class F>
Clock::duration expect_config_error(F&& attempt, std::initializer_list<std::string> parts) {
  const auto start = Clock::now();
  try {
    attempt();
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) EXPECT_TRUE(contains(message, part)) << part << " in: " << message;
    EXPECT_FALSE(contains(message, kSecretToken)) << "the token leaked: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong class: " << deployment_error_class(e) << ": " << e.what();
  }
  return Clock::now() - start;
}

std::string redis_url(int port) { return "redis://127.0.0.1:" + std::to_string(port); }

// --- a Cluster node behind redis:// -----------------------------------------

class RedisUrlAtClusterNode : public ClusterTest {
 protected:
  void SetUp() override {
    ClusterTest::SetUp();
    const auto masters = cluster().masters();
    ASSERT_GE(masters.size(), 2u);
    node_ = masters[0];
    other_ = masters[1];
  }
  RedisServer* node_ = nullptr;   // the one the URL names
  RedisServer* other_ = nullptr;  // serves the test's keys
};

TEST_F(RedisUrlAtClusterNode, LockOnAKeyOfAnotherNodeIsAConfigErrorNamingRedisCluster) {
  Client client(redis_url(node_->port()));
  Lock lock(client, name_on(*other_, "lock"), LockOptions{.token = kSecretToken});
  const auto took =
      expect_config_error([&] { lock.try_lock(); }, {"Cluster node", "redis-cluster://", node_->host()});
  EXPECT_LT(took, 5s) << "a wrong URL is refused at once, not retried as a busy server";
  EXPECT_FALSE(lock.held());
  const auto waited = expect_config_error([&] { lock.try_lock_for(2s); }, {"redis-cluster://"});
  EXPECT_LT(waited, 5s);
}

TEST_F(RedisUrlAtClusterNode, CommandsAndSharedLocksOnAKeyOfAnotherNodeAreConfigErrors) {
  Client client(redis_url(node_->port()));
  expect_config_error([&] { client.command({"SET", name_on(*other_, "cmd"), "v"}); }, {"redis-cluster://"});
  ReadWriteLock rw(client, name_on(*other_, "rw"));
  expect_config_error([&] { rw.try_lock(); }, {"redis-cluster://"});
  expect_config_error([&] { rw.try_lock_shared(); }, {"redis-cluster://"});
  Semaphore permits(client, name_on(*other_, "sem"), 2);
  expect_config_error([&] { permits.try_acquire(); }, {"redis-cluster://"});
}

TEST_F(RedisUrlAtClusterNode, AKeyOfThatNodeStillLocks) {
  // Only a redirection proves the URL wrong: a node answers for its own
  // slots as a single server would (e.g. a one-node cluster).
  Client client(redis_url(node_->port()));
  Lock lock(client, name_on(*node_, "own"));
  ASSERT_TRUE(lock.try_lock());
  lock.release();
}

// --- a Sentinel behind redis:// ----------------------------------------------

class RedisUrlAtSentinel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!sentinels_) sentinels_ = std::make_unique<SentinelSet>();
  }
  static void TearDownTestSuite() { sentinels_.reset(); }
  static SentinelSet& sentinels() { return *sentinels_; }
  static std::string url() { return redis_url(sentinels().sentinel_port(0)); }

 private:
  static inline std::unique_ptr<SentinelSet> sentinels_;
};

TEST_F(RedisUrlAtSentinel, LockIsAConfigErrorNamingRedisSentinelWithoutTheToken) {
  Client client(url());
  Lock lock(client, unique_key("lock"), LockOptions{.token = kSecretToken});
  const auto took = expect_config_error([&] { lock.try_lock(); }, {"Sentinel", "redis-sentinel://"});
  EXPECT_LT(took, 5s);
  EXPECT_FALSE(lock.held());
}

TEST_F(RedisUrlAtSentinel, SharedLocksAndCommandsAreConfigErrors) {
  Client client(url());
  ReadWriteLock rw(client, unique_key("rw"));
  expect_config_error([&] { rw.try_lock_shared(); }, {"redis-sentinel://"});
  Semaphore permits(client, unique_key("sem"), 2);
  expect_config_error([&] { permits.try_acquire(); }, {"redis-sentinel://"});
  expect_config_error([&] { client.command({"SET", unique_key("cmd"), kSecretToken}); }, {"redis-sentinel://"});
}

TEST_F(RedisUrlAtSentinel, TheSameSentinelsBehindRedisSentinelStillLock) {
  // The sentinels' own connections expect a Sentinel (ServerRole::sentinel).
  Client client(sentinels().url());
  Lock lock(client, unique_key("lock"));
  ASSERT_TRUE(lock.try_lock());
  lock.release();
}

// --- arguments echoed in an error reply ---------------------------------------

// SET renamed away: the server answers a lock's SET as a Sentinel did,
// "ERR unknown command 'SET', with args beginning with: '<key>' '<token>' ...".
TEST(EchoedArguments, AnUnknownSetNeverPutsTheTokenInTheError) {
  RedisServer server({.extra_args = {"--rename-command", "SET", "SET-renamed-by-lockon-test"}});
  Client client(server.url());
  Lock lock(client, unique_key("lock"), LockOptions{.token = kSecretToken});
  try {
    lock.try_lock();
    ADD_FAILURE() << "no error";
  } catch (const ReplyError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), "ERR");
    EXPECT_TRUE(contains(message, "unknown command")) << message;
    EXPECT_TRUE(contains(message, "withheld")) << message;
    EXPECT_FALSE(contains(message, kSecretToken)) << "the token leaked: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong class: " << deployment_error_class(e) << ": " << e.what();
  }
  EXPECT_FALSE(lock.held());
  // A caller's own command: the echo is withheld as well.
  try {
    client.command({"SET", unique_key("cmd"), kSecretToken});
    ADD_FAILURE() << "no error";
  } catch (const ReplyError& e) {
    EXPECT_FALSE(contains(e.what(), kSecretToken)) << "the argument leaked: " << e.what();
  }
}

}  // namespace
}  // namespace lockon::test
