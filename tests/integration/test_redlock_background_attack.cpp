// integration/test_redlock_background_attack.cpp — attacks on the Redlock
// background release (redlock_nodes.cpp run_in_background: a release the
// fan-out could not send to a node whose connection was being dialed is
// retried on the process-wide clean-up thread, lock/orphans.*):
//  - a PAUSED node whose release had to be retried (its connection was being
//    re-dialed) must not keep the shared Orphans thread from cleaning
//    single-instance Lock orphans on a healthy server for longer than
//    per_node_timeout at a time: one job, and a Redlock lock/unlock loop
//    (quiet phase first, then with the load);
//  - the retried release is compare-and-delete: when the key expired on the
//    node and someone else took it before the retry ran, the retry must not
//    delete the new holder's key.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "redlock_support.hpp"
#include "support/fault_proxy.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class RedlockBackgroundAttack : public RedlockServers {};

long long script_calls(RedisServer& server) {
  const RawReply info = server.command({"INFO", "commandstats"});
  long long total = 0;
  for (const char* name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
    const auto at = info.str.find(name);
    if (at != std::string::npos) total += std::stoll(info.str.substr(at + std::string(name).size()));
  }
  return total;
}

// The background release is compare-and-delete: the node's key expired (here:
// PEXPIRE 1, as a node whose clock ran fast would) and another holder took it
// before the retry ran; the retry must leave the new holder's key alone.
TEST_F(RedlockBackgroundAttack, RetriedReleaseNeverDeletesANewHoldersKey) {
  start(3);
  const std::string name = unique_key("cad");
  FaultProxy proxy("127.0.0.1", server(2).port());
  std::vector<std::string> nodes = urls();
  nodes[2] = proxy.url();
  int rounds_attacked = 0;
  for (int round = 0; round < 3; ++round) {
    Redlock lock(nodes, name, {.ttl = 10s, .auto_renew = false}, {.per_node_timeout = 1s});
    ASSERT_TRUE(lock.try_lock()) << "round " << round;
    ASSERT_TRUE(eventually(1000ms, [&] { return holders(name) == 3; })) << "round " << round;
    proxy.drop_connections();
    // The fan-out's dial is held back (its release is never sent: a
    // background job), and the job's first script call is held 400 ms.
    const int ping = proxy.add_rule({.command = "PING", .action = FaultAction::delay, .delay = 300ms, .times = 1});
    const int retry =
        proxy.add_rule({.argument_contains = name, .action = FaultAction::delay, .delay = 400ms, .times = 1});
    const long long calls_before = script_calls(server(2));
    lock.unlock();
    // Our key on node 2 "expires", and someone else takes it.
    server(2).command({"PEXPIRE", name, "1"});
    ASSERT_TRUE(eventually(500ms, [&] { return get(2, name).empty(); })) << "round " << round;
    const RawReply taken = server(2).command({"SET", name, "new-holder-token", "NX", "PX", "20000"});
    ASSERT_EQ(taken.str, "OK") << "round " << round;
    const auto took = Clock::now();
    // The retried release reaches the server (or, if the fan-out did send it
    // after all, that one does), after the take-over.
    const bool retried = eventually(3000ms, [&] { return script_calls(server(2)) > calls_before; });
    if (retried && proxy.matched(retry) == 1) ++rounds_attacked;
    EXPECT_TRUE(retried) << "round " << round << ": no release reached node 2 within 3 s";
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(get(2, name), "new-holder-token")
        << "round " << round << ": the retried release deleted another holder's key ("
        << ms_since(took) << " ms after the take-over)";
    EXPECT_GT(server(2).command({"PTTL", name}).integer, 15000) << "round " << round;
    server(2).command({"DEL", name});
    proxy.remove_rule(ping);
    proxy.remove_rule(retry);
  }
  EXPECT_GE(rounds_attacked, 2) << "the delayed retry rarely reached node 2: the attack did not happen";
}

}  // namespace
}  // namespace lockon::test
