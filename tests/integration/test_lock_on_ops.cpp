// integration/test_lock_on_ops.cpp — issue 17's library fixes, on real
// servers: LOCKON_REDIS_URL with several URLs is Redlock for the default
// locker too; RedisLocker::redlock refuses a server listed twice; outages
// reported through lock_on name the function and the lock key and keep
// their type.
#include <chrono>
#include <cstdlib>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"
#include "lockon/metrics.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

// Sets LOCKON_REDIS_URL for one test and restores it (and the default locker).
class ScopedUrlEnv {
 public:
  explicit ScopedUrlEnv(const std::string& value) {
    if (const char* old = std::getenv("LOCKON_REDIS_URL")) saved_ = old;
    ::setenv("LOCKON_REDIS_URL", value.c_str(), 1);
    reset_default_locker();
  }
  ~ScopedUrlEnv() {
    if (saved_) ::setenv("LOCKON_REDIS_URL", saved_->c_str(), 1);
    else ::unsetenv("LOCKON_REDIS_URL");
    reset_default_locker();
  }
  ScopedUrlEnv(const ScopedUrlEnv&) = delete;
  ScopedUrlEnv& operator=(const ScopedUrlEnv&) = delete;

 private:
  std::optional<std::string> saved_;
};

class LockOnOps : public RedisTest {};

TEST_F(LockOnOps, SeveralUrlsInTheEnvironmentMeanRedlockForTheDefaultLocker) {
  auto nodes = start_servers(3);
  const ScopedUrlEnv env(nodes[0]->url() + "  " + nodes[1]->url() + "\t" + nodes[2]->url());
  const RedisLocker locker = default_locker();
  int held_on = 0;
  const auto locked = locker.lock_on<0>("ops::env-redlock", [&](int) {
    for (const auto& node : nodes) held_on += static_cast<int>(node->command({"DBSIZE"}).integer > 0);
  });
  locked(7);
  EXPECT_EQ(held_on, 3) << "the lock key is set on all three masters while the function runs";
  for (const auto& node : nodes) EXPECT_EQ(node->command({"EXISTS", locked.key_for(7)}).integer, 0);
}

TEST_F(LockOnOps, OneUrlInTheEnvironmentIsOneServer) {
  const ScopedUrlEnv env(" " + server().url() + " ");
  const auto locked = default_locker().lock_on<0>("ops::env-single", [&](int) {
    EXPECT_EQ(server().command({"EXISTS", default_locker().key_for<0>("ops::env-single", 1)}).integer, 1);
  });
  locked(1);
}

TEST_F(LockOnOps, RedlockWithAServerListedTwiceIsAConfigErrorNamingIt) {
  auto nodes = start_servers(2);
  const std::string secret_url = "redis://:pw-s3cret-dup@127.0.0.1:" + std::to_string(nodes[0]->port());
  try {
    (void)RedisLocker::redlock({nodes[0]->url(), nodes[1]->url(), secret_url});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(nodes[0]->port())), std::string::npos) << what;
    EXPECT_NE(what.find("twice"), std::string::npos) << what;
    EXPECT_EQ(what.find("pw-s3cret-dup"), std::string::npos) << what;
  }
}

TEST_F(LockOnOps, AnOutageNamesTheFunctionAndTheKeyAndKeepsItsType) {
  RedisLocker locker("redis://:pw-s3cret-x@127.0.0.1:1?connect_timeout=500ms");
  const auto locked = locker.lock_on<0>("billing::close", [](int) { ADD_FAILURE() << "must not run"; });
  try {
    locked(42);
    FAIL() << "expected ConnectError";
  } catch (const ConnectError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lock_on 'billing::close'"), std::string::npos) << what;
    EXPECT_NE(what.find(locked.key_for(42)), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1:1"), std::string::npos) << "still names the endpoint: " << what;
    EXPECT_EQ(what.find("pw-s3cret-x"), std::string::npos) << what;
  }
}

TEST_F(LockOnOps, AWrongTypeKeyNamesTheFunctionAndTheKey) {
  RedisLocker locker(server().url());
  const auto locked = locker.lock_on<0>("inventory::take", [](int) { ADD_FAILURE() << "must not run"; });
  server().command({"HSET", locked.key_for(3), "f", "v"});
  try {
    locked(3);
    FAIL() << "expected WrongTypeError";
  } catch (const WrongTypeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lock_on 'inventory::take'"), std::string::npos) << what;
    EXPECT_NE(what.find(locked.key_for(3)), std::string::npos) << what;
    EXPECT_EQ(e.code(), "WRONGTYPE");
  }
  server().command({"DEL", locked.key_for(3)});
}


// A known workload against a real server, then the Prometheus text is
// scraped: every count must be exact.
TEST_F(LockOnOps, MetricsCountAKnownWorkloadExactly) {
  reset_metrics();
  RedisLocker locker(server().url());
  const auto ok = locker.lock_on<0>("metrics::ok", [](int) { std::this_thread::sleep_for(30ms); });
  for (int i = 0; i < 3; ++i) ok(i);

  Lock blocker(Client(server().url()), locker.key_for<0>("metrics::busy", 1));
  ASSERT_TRUE(blocker.try_lock());
  const auto busy = locker.with_policy({.max_retry = 1, .retry_delay = 0ms}).try_lock_on<0>("metrics::busy", [](int) { return 1; });
  EXPECT_FALSE(busy(1).has_value());
  EXPECT_FALSE(busy(1).has_value());
  blocker.unlock();

  Lock blocker2(Client(server().url()), locker.key_for<0>("metrics::slow", 1));
  ASSERT_TRUE(blocker2.try_lock());
  const auto slow = locker.with_policy({.max_retry = 0, .retry_delay = 50ms, .timeout = 200ms})
                        .lock_on<0>("metrics::slow", [](int) {});
  EXPECT_THROW(slow(1), AcquireTimeout);
  blocker2.unlock();

  const auto stolen = locker.lock_on<0>("metrics::stolen", [&](LockContext& context, int) {
    server().command({"SET", context.key(), "usurper", "PX", "60000"});
  });
  EXPECT_THROW(stolen(1), LockLost);
  // The usurper's key would outlive the test (60 s) and fail a repeat
  // (--gtest_repeat=2) with a busy acquisition.
  server().command({"DEL", locker.key_for<0>("metrics::stolen", 1)});

  const std::string text = prometheus_text();
  const auto has = [&](const std::string& line) {
    EXPECT_NE(text.find("\n" + line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  has("lockon_acquisitions_total{function=\"metrics::ok\"} 3");
  has("lockon_busy_total{function=\"metrics::ok\"} 0");
  has("lockon_acquisitions_total{function=\"metrics::busy\"} 0");
  has("lockon_busy_total{function=\"metrics::busy\"} 2");
  has("lockon_timeouts_total{function=\"metrics::slow\"} 1");
  has("lockon_acquisitions_total{function=\"metrics::stolen\"} 1");
  has("lockon_lease_losses_total{function=\"metrics::stolen\"} 1");
  has("lockon_lease_losses_total{function=\"metrics::ok\"} 0");
  // Each of the three calls held the lock >= 30 ms: none in the 25 ms bucket.
  has("lockon_hold_seconds_bucket{function=\"metrics::ok\",le=\"0.025\"} 0");
  has("lockon_hold_seconds_bucket{function=\"metrics::ok\",le=\"+Inf\"} 3");
  has("lockon_hold_seconds_count{function=\"metrics::ok\"} 3");
  has("lockon_wait_seconds_count{function=\"metrics::ok\"} 3");
  has("lockon_wait_seconds_count{function=\"metrics::busy\"} 0");
  has("# TYPE lockon_wait_seconds histogram");

  const auto snapshot = metrics_snapshot();
  ASSERT_EQ(snapshot.size(), 4u);
  EXPECT_EQ(snapshot[1].function, "metrics::ok");
  EXPECT_GE(snapshot[1].hold.sum_ms, 90.0);
  EXPECT_EQ(text.find(locker.key_for<0>("metrics::ok", 0)), std::string::npos) << "never per key";
}

}  // namespace
}  // namespace lockon::test
