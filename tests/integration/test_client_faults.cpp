// Client-layer safety under server faults, against real redis-servers:
//   - a connection that still owes replies is never handed to the next caller
//     (error reply mid-pipeline under maxmemory/noeviction, pool size 1);
//   - a warm pool survives a server restart (graceful or SIGKILL) without a
//     single failed call: stale sockets are found before sending;
//   - the HELLO 2 handshake (with AUTH for requirepass and ACL users, SELECT
//     pipelined behind it) replaces the separate AUTH;
//   - a SUBSCRIBE refused by ACL (-NOPERM) is noticed, reported once, and
//     waiters fall back to polling;
//   - injected-style error codes map to the documented ReplyError classes.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "client/client_impl.hpp"
#include "lockon/diagnostics.hpp"
#include "lockon/errors.hpp"
#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace std::chrono_literals;
using namespace lockon;
using namespace lockon::test;
using Clock = std::chrono::steady_clock;

// "calls=N" of one command in INFO commandstats (0 if never called).
long long command_calls(RawConnection& stats, const std::string& command) {
  const std::string info = stats.command({"INFO", "commandstats"}).str;
  const std::string field = "cmdstat_" + command + ":calls=";
  const auto at = info.find(field);
  if (at == std::string::npos) return 0;
  return std::stoll(info.substr(at + field.size()));
}

// Runs `call`; returns its result, or records the exception as a failure.
template <class F>
auto no_throw(const char* what, F call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& error) {
    ADD_FAILURE() << what << " threw: " << error.what();
  }
  return {};
}

// ------------------------------------------------ replies owed are never reused

TEST(ClientFaults, FencedAcquireRejectedByOomLeavesNoReplyForTheNextCaller) {
  RedisServer server;
  const Client client(server.url(), PoolOptions{.size = 1});
  const std::string held = "faults:held";
  ASSERT_TRUE(server.command({"SET", held, "someone-else", "PX", "60000"}).is("OK"));
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}).is("OK"));
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", "1"}).is("OK"));

  Lock fenced(client, "faults:mine", {.fencing = true});
  // The acquisition is refused (OOM); whatever the lock layer reports, it
  // must not leave the pool's only connection out of step.
  EXPECT_THROW(fenced.try_lock(), Error);
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", "0"}).is("OK"));

  Lock other_fenced(client, held, {.fencing = true});
  EXPECT_FALSE(no_throw("fenced try_lock on a held key", [&] { return other_fenced.try_lock(); }));
  Lock other(client, held);
  EXPECT_FALSE(no_throw("try_lock on a held key", [&] { return other.try_lock(); }));
  EXPECT_EQ(no_throw("ECHO", [&] { return client.command({"ECHO", "mine"}).as_string(); }), "mine");
  const auto replies =
      no_throw("pipeline", [&] { return client.pipeline({{"ECHO", "first"}, {"ECHO", "second"}}); });
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].as_string(), "first");
  EXPECT_EQ(replies[1].as_string(), "second");
  EXPECT_TRUE(server.command({"GET", held}).is("someone-else"));
}

TEST(ClientFaults, PoolReconnectsAConnectionGivenBackWithRepliesOwed) {
  RedisServer server;
  const Client client(server.url(), PoolOptions{.size = 1});
  {
    auto connection = client.impl()->pool().borrow();
    connection->ensure_connected();
    const std::array<std::string_view, 2> first{"ECHO", "first"};
    const std::array<std::string_view, 2> second{"ECHO", "second"};
    connection->append(first);
    connection->append(second);
    const detail::ReplyPtr reply = connection->read_reply("ECHO");
    EXPECT_EQ(std::string_view(reply->str, reply->len), "first");
    EXPECT_TRUE(connection->owes_replies());
  }  // given back owing "second"
  EXPECT_EQ(client.command({"ECHO", "third"}).as_string(), "third");
  {
    auto connection = client.impl()->pool().borrow();
    EXPECT_FALSE(connection->owes_replies());
    // Queued and never sent (the caller threw before flushing): same rule.
    const std::array<std::string_view, 2> lost{"SET", "faults:never"};
    connection->append(lost);
  }
  EXPECT_EQ(client.command({"ECHO", "fourth"}).as_string(), "fourth");
  EXPECT_EQ(server.command({"EXISTS", "faults:never"}).integer, 0);
}

// ------------------------------------------------------ restarts, idle sockets

enum class Restart { graceful, sigkill };

class ClientRestart : public ::testing::TestWithParam<Restart> {};

TEST_P(ClientRestart, WarmPoolAnswersEveryCallAfterARestartOnTheFirstTry) {
  constexpr std::size_t kPool = 4;
  RedisServer server;
  const Client client(server.url() + "?socket_timeout=2s", PoolOptions{.size = kPool, .wait_timeout = 2000ms});
  auto& pool = client.impl()->pool();
  {  // every pooled connection opened
    std::vector<detail::Pool::Lease> leases;
    for (std::size_t i = 0; i < kPool; ++i) leases.push_back(pool.borrow());
    for (auto& lease : leases) lease->ensure_connected();
  }
  if (GetParam() == Restart::sigkill) server.kill();
  server.restart();  // stops it gracefully first if still running

  // Each stale connection exercised once, directly...
  {
    std::vector<detail::Pool::Lease> leases;
    for (std::size_t i = 0; i < kPool; ++i) leases.push_back(pool.borrow());
    for (auto& lease : leases) {
      const std::array<std::string_view, 1> ping{"PING"};
      const detail::ReplyPtr reply = no_throw("PING on a pooled connection", [&] { return lease->command(ping, "PING"); });
      ASSERT_TRUE(reply != nullptr);
      EXPECT_EQ(std::string_view(reply->str, reply->len), "PONG");
    }
  }
  // ...and many calls from as many threads as connections, through the API.
  if (GetParam() == Restart::sigkill) server.kill();
  server.restart();
  std::atomic<int> failures{0};
  std::atomic<int> successes{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kPool; ++t) {
    threads.emplace_back([&, t] {
      Lock lock(client, "faults:restart:" + std::to_string(t));
      for (int i = 0; i < 25; ++i) {
        try {
          if (client.command({"INCR", "faults:counter"}).as_integer() > 0) ++successes;
          if (lock.try_lock()) {
            lock.unlock();
            ++successes;
          }
        } catch (const std::exception& error) {
          ++failures;
          std::lock_guard guard(first_error_mutex);
          if (first_error.empty()) first_error = error.what();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_EQ(successes.load(), static_cast<int>(kPool) * 25 * 2);
  EXPECT_TRUE(server.command({"GET", "faults:counter"}).is(std::to_string(kPool * 25)));
}

INSTANTIATE_TEST_SUITE_P(Restarts, ClientRestart, ::testing::Values(Restart::graceful, Restart::sigkill),
                         [](const auto& param_info) { return param_info.param == Restart::graceful ? "Graceful" : "Sigkill"; });

TEST(ClientFaults, IdleConnectionClosedByTheServersClientTimeoutIsReplacedBeforeSending) {
  RedisServer server({.extra_args = {"--timeout", "1"}});
  const Client client(server.url(), PoolOptions{.size = 1});
  ASSERT_EQ(client.command({"SET", "k", "1"}).as_string(), "OK");
  // The server closes idle clients after 1 s (checked by its cron, ~100 ms);
  // the fresh connection asking is the only one left then.
  ASSERT_TRUE(eventually(3000ms, [&] {
    return server.command({"INFO", "clients"}).str.find("connected_clients:1\r") != std::string::npos;
  })) << "the server never closed the idle client";
  EXPECT_EQ(no_throw("INCR after the server dropped us", [&] { return client.command({"INCR", "k"}).as_integer(); }), 2);
}

// ------------------------------------------------------------------ handshake

TEST(ClientHandshake, HelloCarriesAuthForRequirepassAndSelectStillApplies) {
  RedisServer server({.requirepass = "p@ss word"});
  RawConnection stats = server.connect();  // its own AUTH counted before
  const long long auth_before = command_calls(stats, "auth");
  const Client client(server.url() + "/3");
  EXPECT_EQ(client.command({"SET", "where", "db3"}).as_string(), "OK");
  EXPECT_EQ(command_calls(stats, "hello"), 1);
  EXPECT_EQ(command_calls(stats, "auth"), auth_before) << "HELLO ... AUTH replaces the separate AUTH";
  EXPECT_EQ(command_calls(stats, "select"), 1);
  ASSERT_TRUE(stats.command({"SELECT", "3"}).is("OK"));
  EXPECT_TRUE(stats.command({"GET", "where"}).is("db3"));
  // RESP2 was asked for: replies keep the shapes lockon parses.
  EXPECT_EQ(client.command({"HGETALL", "nothing"}).elements().size(), 0u);
}

TEST(ClientHandshake, AclUserAuthenticatesThroughHelloAndWrongPasswordIsAuthError) {
  RedisServer server({.acl_users = {"alice on >s3cret ~* &* +@all"}});
  const std::string at = "@127.0.0.1:" + std::to_string(server.port());
  RawConnection stats = server.connect();
  const Client alice("redis://alice:s3cret" + at);
  EXPECT_EQ(alice.command({"ACL", "WHOAMI"}).as_string(), "alice");
  EXPECT_EQ(command_calls(stats, "hello"), 1);
  EXPECT_EQ(command_calls(stats, "auth"), 0);

  const Client impostor("redis://alice:guess" + at);
  try {
    impostor.ping();
    ADD_FAILURE() << "alice authenticated with a wrong password";
  } catch (const AuthError& error) {
    EXPECT_EQ(error.code(), "WRONGPASS") << error.what();
    EXPECT_EQ(std::string(error.what()).find("guess"), std::string::npos) << error.what();
  }
}

TEST(ClientHandshake, NoPasswordAgainstRequirepassIsAuthErrorFromTheHandshake) {
  RedisServer server({.requirepass = "secret"});
  const Client client(server.url_without_auth());
  try {
    client.ping();
    ADD_FAILURE() << "PING without credentials succeeded";
  } catch (const AuthError& error) {
    EXPECT_EQ(error.code(), "NOAUTH") << error.what();
    EXPECT_NE(std::string(error.what()).find("HELLO"), std::string::npos) << error.what();
  }
}

// ---------------------------------------------------------- ACL pub/sub rights

struct Warnings {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> seen;
  Warnings() {
    set_warning_handler([this](std::string_view topic, std::string_view message) {
      std::lock_guard lock(mutex);
      seen.emplace_back(topic, message);
    });
  }
  ~Warnings() { set_warning_handler({}); }
  std::vector<std::pair<std::string, std::string>> about(std::string_view word) {
    std::lock_guard lock(mutex);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& w : seen)
      if (w.first.find(word) != std::string::npos) out.push_back(w);
    return out;
  }
};

TEST(ClientAclPubSub, WaiterWithoutChannelRightsWarnsOnceAndAcquiresByPolling) {
  Warnings warnings;
  RedisServer server({.acl_users = {"app on >pw ~* resetchannels +@all"}});
  const std::string endpoint = "127.0.0.1:" + std::to_string(server.port());
  const Client client("redis://app:pw@" + endpoint);
  const std::string name = "faults:acl";
  // Held by a holder that simply lets its lease expire: no release script,
  // so only the waiter's subscription meets the missing channel right.
  ASSERT_TRUE(server.command({"SET", name, "holder", "PX", "400"}).is("OK"));
  Lock waiter(client, name, {.ttl = 5000ms, .auto_renew = false, .wait_poll_interval = 100ms});
  const auto started = Clock::now();
  EXPECT_TRUE(no_throw("waiter lock", [&] { return waiter.try_lock_for(3000ms); }));
  const auto waited = ms_since(started);
  EXPECT_GE(waited, 300);
  EXPECT_LT(waited, 1500) << "the waiter should poll every 100 ms";

  // A second wait on the same server: still polling, still no second warning.
  ASSERT_TRUE(server.command({"SET", "faults:acl2", "holder", "PX", "200"}).is("OK"));
  Lock second(client, "faults:acl2", {.ttl = 5000ms, .auto_renew = false, .wait_poll_interval = 100ms});
  EXPECT_TRUE(no_throw("second waiter lock", [&] { return second.try_lock_for(3000ms); }));

  const auto acl = warnings.about("acl");
  ASSERT_EQ(acl.size(), 1u);
  const std::string& message = acl.front().second;
  EXPECT_NE(message.find(endpoint), std::string::npos) << message;
  EXPECT_NE(message.find("{" + name + "}:wake:*"), std::string::npos) << message;
  EXPECT_NE(message.find("poll"), std::string::npos) << message;
  EXPECT_NE(message.find("&"), std::string::npos) << message;
  EXPECT_EQ(message.find("pw@"), std::string::npos) << message;
  // Refused once per channel, not retried in a loop.
  RawConnection stats = server.connect();
  const std::string info = stats.command({"INFO", "commandstats"}).str;
  const auto at = info.find("cmdstat_subscribe:");
  const std::string line = at == std::string::npos ? "" : info.substr(at, info.find('\r', at) - at);
  // Refused once per channel (calls=0 and rejected_calls=2), not in a loop.
  EXPECT_NE(line.find("rejected_calls=2,"), std::string::npos) << line;
  try {
    waiter.unlock();
    second.unlock();
  } catch (...) {
  }
}

// ----------------------------------------------------------- error mapping

TEST(ClientErrorMapping, ReplicaWritesAreReadOnlyErrorAclRefusalsPermissionErrorOomPlainReplyError) {
  auto servers = start_servers(2, {.acl_users = {"reader on >pw ~* &* +@all -incr"}});
  RedisServer& primary = *servers[0];
  RedisServer& replica = *servers[1];
  ASSERT_TRUE(replica.command({"REPLICAOF", "127.0.0.1", std::to_string(primary.port())}).is("OK"));
  const Client to_replica(replica.url());
  try {
    to_replica.command({"SET", "k", "v"});
    ADD_FAILURE() << "a replica accepted a write";
  } catch (const ReadOnlyError& error) {
    EXPECT_EQ(error.code(), "READONLY");
  }

  const Client reader("redis://reader:pw@127.0.0.1:" + std::to_string(primary.port()));
  try {
    reader.command({"INCR", "n"});
    ADD_FAILURE() << "a forbidden command ran";
  } catch (const PermissionError& error) {
    EXPECT_EQ(error.code(), "NOPERM");
  }

  ASSERT_TRUE(primary.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}).is("OK"));
  ASSERT_TRUE(primary.command({"CONFIG", "SET", "maxmemory", "1"}).is("OK"));
  const Client client(primary.url());
  try {
    client.command({"SET", "k", "v"});
    ADD_FAILURE() << "a write beyond maxmemory succeeded";
  } catch (const ReplyError& error) {
    EXPECT_EQ(error.code(), "OOM");
  }
  ASSERT_TRUE(primary.command({"CONFIG", "SET", "maxmemory", "0"}).is("OK"));
  EXPECT_EQ(client.command({"SET", "k", "v"}).as_string(), "OK");
}

}  // namespace
