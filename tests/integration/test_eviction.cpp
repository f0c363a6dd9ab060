// integration/test_eviction.cpp — what a server at its `maxmemory` does to
// locks (README, "Guarantees, and when they do not hold").
//   - noeviction: held locks stay held, renewable and releasable; new
//     acquisitions are refused with a typed error (ReplyError, code OOM);
//   - any evicting policy can drop a held lock (lock keys carry a TTL, so
//     even volatile-* policies take them; volatile-ttl first of all): the
//     exclusion does not hold, and the holder is told (loss signal);
//   - lockon says so once per server (set_warning_handler) when the first
//     auto-renewed lock there is acquired, and stays quiet when the server
//     cannot evict or the user may not read its configuration.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockon/lockon.hpp"
#include "integration/warning_log.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

long long used_memory(RedisServer& server) {
  const RawReply info = server.command({"INFO", "memory"});
  const auto at = info.str.find("used_memory:");
  if (at == std::string::npos) throw std::runtime_error("INFO memory has no used_memory");
  return std::stoll(info.str.substr(at + 12));
}

TEST(Eviction, NoevictionKeepsHeldLocksAndRefusesNewOnesWithATypedError) {
  RedisServer server({.extra_args = {"--maxmemory-policy", "noeviction"}});
  const Client client(server.url());
  std::atomic<int> losses{0};
  Lock held(client, "evict:held",
            {.ttl = 900ms, .fencing = true, .on_lost = [&](const LossEvent&) { ++losses; }});
  held.lock();
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", "1"}).is("OK"));  // full from now on
  // A write refused: the server is really out of memory for new data.
  ASSERT_TRUE(server.command({"SET", "evict:probe", "x"}).is_error());
  std::this_thread::sleep_for(2s);  // over two leases: only renewals keep it
  EXPECT_TRUE(held.owned());
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(losses.load(), 0);
  Lock fresh(client, "evict:new", {.ttl = 5s});
  try {
    fresh.try_lock();
    ADD_FAILURE() << "acquired a new lock on a full server";
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.code(), "OOM") << e.what();
  }
  EXPECT_FALSE(fresh.held());
  held.unlock();  // the release only deletes: allowed when full
  EXPECT_EQ(held.last_unlock_error(), nullptr);
  EXPECT_EQ(server.command({"EXISTS", "evict:held"}).integer, 0);
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", "0"}).is("OK"));
  EXPECT_TRUE(fresh.try_lock());
  fresh.unlock();
}

TEST(Eviction, VolatileTtlEvictsAHeldLockAndTheHolderIsTold) {
  RedisServer server({.extra_args = {"--maxmemory-policy", "volatile-ttl"}});
  const Client client(server.url());
  std::mutex mutex;
  std::optional<LossEvent> loss;
  Lock held(client, "evict:held", {.ttl = 1500ms, .on_lost = [&](const LossEvent& event) {
                                     std::lock_guard guard(mutex);
                                     loss = event;
                                   }});
  held.lock();
  // Fill with keys without a TTL: only volatile keys (the lock's) can go.
  const long long limit = used_memory(server) + 256 * 1024;
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", std::to_string(limit)}).is("OK"));
  const std::string value(16 * 1024, 'x');
  bool evicted = false;
  for (int i = 0; i < 200 && !evicted; ++i) {
    const RawReply reply = server.command({"SET", "evict:filler:" + std::to_string(i), value});
    evicted = server.command({"EXISTS", "evict:held"}).integer == 0;
    if (reply.is_error()) break;  // full with nothing left to evict
  }
  ASSERT_TRUE(evicted) << "the held lock key was never evicted (used " << used_memory(server) << " of " << limit
                       << ")";
  // The exclusion is gone: another client may take the key now (it is not
  // full of volatile keys any more once fillers are removed).
  ASSERT_TRUE(server.command({"CONFIG", "SET", "maxmemory", "0"}).is("OK"));
  Lock other(client, "evict:held", {.ttl = 5s});
  EXPECT_TRUE(other.try_lock()) << "the evicted key should be free";
  // ...and the first holder learns it at its next renewal (every ttl/3).
  EXPECT_TRUE(eventually(2000ms, [&] { return held.lost(); }));
  {
    std::lock_guard guard(mutex);
    ASSERT_TRUE(loss.has_value());
    EXPECT_EQ(loss->reason, LossReason::taken);
  }
  held.unlock();
  ASSERT_NE(held.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(held.last_unlock_error()), LockNotOwned);
  EXPECT_TRUE(other.owned());  // the failed release did not touch the new holder's key
  other.unlock();
}

// How many CONFIG calls the server served (INFO commandstats): the check ran.
long long config_calls(RedisServer& server) {
  const RawReply info = server.command({"INFO", "commandstats"});
  const auto at = info.str.find("cmdstat_config|get:calls=");
  if (at == std::string::npos) return 0;
  return std::stoll(info.str.substr(at + 25));
}

TEST(Eviction, AServerThatMayEvictIsReportedOnceWhenAnAutoRenewedLockIsTakenThere) {
  WarningLog warnings;
  RedisServer server({.extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}});
  const Client client(server.url());
  const std::string topic = "eviction:" + server.host() + ":" + std::to_string(server.port());
  Lock lock(client, "evict:warned", {.ttl = 30s, .token = std::string("secret-token-0123456789")});
  lock.lock();
  ASSERT_TRUE(eventually(3000ms, [&] { return !warnings.about(topic).empty(); })) << "no warning for " << topic;
  const auto [_, message] = warnings.about(topic).front();
  EXPECT_NE(message.find("maxmemory-policy allkeys-lru"), std::string::npos) << message;
  EXPECT_NE(message.find("104857600"), std::string::npos) << message;
  EXPECT_NE(message.find("noeviction"), std::string::npos) << message;
  EXPECT_EQ(message.find("secret-token"), std::string::npos) << message;
  lock.unlock();
  // Once per server and process: more locks there say nothing more.
  for (int i = 0; i < 3; ++i) {
    Lock again(client, "evict:warned:" + std::to_string(i), {.ttl = 30s});
    again.lock();
    again.unlock();
  }
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(warnings.about(topic).size(), 1u);
}

TEST(Eviction, NoWarningWhenTheServerCannotEvictOrMayNotBeAsked) {
  WarningLog warnings;
  RedisServer noeviction({.extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}});
  RedisServer unlimited({.extra_args = {"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"}});
  RedisServer restricted({.acl_users = {"app on >app-pass ~* &* +@all -config"},
                          .extra_args = {"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}});
  struct Case {
    RedisServer* server;
    std::string url;
    const char* what;
  };
  const std::vector<Case> cases{
      {&noeviction, noeviction.url(), "noeviction"},
      {&unlimited, unlimited.url(), "maxmemory 0"},
      {&restricted, "redis://app:app-pass@" + restricted.host() + ":" + std::to_string(restricted.port()),
       "a user without +config"}};
  for (const Case& c : cases) {
    const Client client(c.url);
    Lock lock(client, "evict:quiet", {.ttl = 30s});
    lock.lock();
    // The check ran (the server served, or refused, a CONFIG GET)...
    const bool asked = eventually(3000ms, [&] {
      const RawReply info = c.server->command({"INFO", "commandstats"});
      return info.str.find("cmdstat_config|get:") != std::string::npos;
    });
    EXPECT_TRUE(asked) << c.what << ": the check never reached the server";
    lock.unlock();
    // ...and said nothing.
    const std::string topic = "eviction:" + c.server->host() + ":" + std::to_string(c.server->port());
    EXPECT_TRUE(warnings.about(topic).empty()) << c.what << ": " << warnings.about(topic).front().second;
  }
  EXPECT_GE(config_calls(noeviction), 1);
}

}  // namespace
}  // namespace lockon::test
