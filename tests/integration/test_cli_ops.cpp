// integration/test_cli_ops.cpp — issue 17's operator fixes to `lockon run`:
// flock-like durations (a bare number is seconds), refusal of a TTL too short
// to renew, LOCKON_REDIS_URL with several URLs (Redlock), and the Redlock
// verbose report naming failed nodes.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/cli_support.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class CliOps : public RedisTest {};

// flock -w 1 waits one second; so does lockon's (it used to wait 1 ms).
TEST_F(CliOps, BareWaitNumberIsSecondsLikeFlock) {
  const std::string name = key("bare-wait");
  Lock holder(Client(server().url()), name);
  ASSERT_TRUE(holder.try_lock());
  const auto start = Clock::now();
  const ProcessResult result = lockon({"run", "--url", server().url(), "-w", "1", name, "--", "true"});
  const long long elapsed = ms_since(start);
  EXPECT_EQ(result.exit_code, kWaitTimedOut) << result.describe();
  EXPECT_GE(elapsed, 900);
  EXPECT_LE(elapsed, 3000);
}

TEST_F(CliOps, FractionalSecondsAndUnitsAreAccepted) {
  const std::string name = key("fraction-wait");
  Lock holder(Client(server().url()), name);
  ASSERT_TRUE(holder.try_lock());
  auto start = Clock::now();
  ProcessResult result = lockon({"run", "--url", server().url(), "-w", "0.5", name, "--", "true"});
  long long elapsed = ms_since(start);
  EXPECT_EQ(result.exit_code, kWaitTimedOut) << result.describe();
  EXPECT_GE(elapsed, 450);
  EXPECT_LE(elapsed, 2500);
  start = Clock::now();
  result = lockon({"run", "--url", server().url(), "-w", "300ms", name, "--", "true"});
  elapsed = ms_since(start);
  EXPECT_EQ(result.exit_code, kWaitTimedOut) << result.describe();
  EXPECT_GE(elapsed, 250);
  EXPECT_LE(elapsed, 2000);
  // A bare --ttl is seconds too: 2 = 2000 ms of lease.
  holder.unlock();
  result = lockon({"run", "--url", server().url(), "--ttl", "2", name, "--", "sh", "-c",
                   "redis-cli -p " + std::to_string(server().port()) + " PTTL " + name});
  EXPECT_EQ(result.exit_code, 0) << result.describe();
  const long long pttl = std::stoll(result.out);
  EXPECT_GT(pttl, 1000) << result.out;
  EXPECT_LE(pttl, 2000) << result.out;
}

TEST_F(CliOps, TtlTooShortToRenewIsRefused) {
  const std::string name = key("short");
  for (const std::string ttl : {"1ms", "100ms", "0.1"}) {
    const ProcessResult result = lockon({"run", "--url", server().url(), "--ttl", ttl, name, "--", "true"});
    EXPECT_EQ(result.exit_code, kUsage) << ttl << ": " << result.describe();
    EXPECT_NE(result.err.find("too short"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("300ms"), std::string::npos) << "names the minimum: " << result.err;
  }
  const ProcessResult bad = lockon({"run", "--url", server().url(), "-w", "soon", key("w"), "--", "true"});
  EXPECT_EQ(bad.exit_code, kUsage) << bad.describe();
  EXPECT_NE(bad.err.find("--wait"), std::string::npos) << "names the option: " << bad.err;
  // Checked by key: other tests' fence counters may live on the shared server.
  EXPECT_EQ(server().command({"EXISTS", name}).integer, 0) << "nothing locked on a usage error";
}

// With one of three nodes dead, -v says how many nodes granted the lock and
// names the failed one with its error.
TEST_F(CliOps, VerboseRedlockCountsGrantsAndNamesFailedNodes) {
  auto nodes = start_servers(3);
  const std::string dead = "127.0.0.1:" + std::to_string(nodes[1]->port());
  nodes[1]->kill();
  const ProcessResult result = lockon({"run", "-v", "--url", nodes[0]->url(), "--url", nodes[1]->url(), "--url",
                                       nodes[2]->url(), key("two-of-three"), "--", "true"});
  EXPECT_EQ(result.exit_code, 0) << result.describe();
  std::string acquired_line;
  std::size_t at = result.err.find("acquired '");
  if (at != std::string::npos) acquired_line = result.err.substr(at, result.err.find('\n', at) - at);
  EXPECT_NE(acquired_line.find("on 2 of 3 nodes"), std::string::npos) << result.err;
  EXPECT_NE(acquired_line.find("failed: " + dead + ": "), std::string::npos) << result.err;
}

}  // namespace
}  // namespace lockon::test
