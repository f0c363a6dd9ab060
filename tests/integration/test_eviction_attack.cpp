// integration/test_eviction_attack.cpp — attacks on the eviction check
// (client/eviction_check.*: the first auto-renewed lock on a server makes its
// renewal lane run CONFIG GET maxmemory maxmemory-policy, ≤ 300 ms, before
// its first renewal). The check must never cost a lease: not when the server
// stalls right after the first acquisition (the check and the first renewal
// then both wait for it), not when CONFIG is renamed away, not when CONFIG
// GET answers 2 s late (and the late answer must not be read by anyone else).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lockon/lockon.hpp"
#include "support/fault_proxy.hpp"
#include "integration/warning_log.hpp"
#include "support/fixtures.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> kMayEvict{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"};

std::string topic_of(const std::string& host, int port) { return "eviction:" + host + ":" + std::to_string(port); }

// Holds `lock` for `hold`, checking every 50 ms that it is still ours and the
// key still lives on `server`: renewals went on normally.
void expect_held_throughout(Lock& lock, RedisServer& server, const std::string& name, std::chrono::milliseconds hold,
                            const std::string& what) {
  const auto until = Clock::now() + hold;
  RawConnection raw = server.connect();
  for (int i = 0; i < 1000 && Clock::now() < until; ++i) {
    ASSERT_FALSE(lock.lost()) << what << ": lease reported lost after " << i * 50 << " ms";
    ASSERT_GT(raw.command({"PTTL", name}).integer, 0) << what << ": the key expired";
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(lock.owned()) << what;
}

struct Stall {
  std::chrono::milliseconds ttl;
  std::chrono::milliseconds stall;
  bool sigstop;  // else DEBUG SLEEP
};

// The server stalls right after the first acquisition on it, so the check
// (one round trip ≤ 300 ms) and the first renewal (due at ttl/3) both wait
// for it. The stall is short enough that renewals alone keep the lease (the
// first renewal, due at ttl/3, still lands well within the ttl after it):
// only a check that held renewals back beyond its 300 ms could lose it.
TEST(EvictionAttack, StallRightAfterTheFirstAcquisitionLosesNoLease) {
  const std::vector<Stall> cases{{600ms, 150ms, true}, {1200ms, 250ms, true}, {1200ms, 250ms, false},
                                 {1200ms, 500ms, true}};
  for (const Stall& c : cases) {
    const std::string what = "ttl " + std::to_string(c.ttl.count()) + " ms, stall " +
                             std::to_string(c.stall.count()) + " ms by " + (c.sigstop ? "SIGSTOP" : "DEBUG SLEEP");
    RedisServer server({.extra_args = kMayEvict});  // fresh: its lane's check is still to come
    WarningLog warnings;
    const Client client(server.url());
    const std::string name = unique_key("stall");
    std::atomic<int> losses{0};
    Lock lock(client, name, {.ttl = c.ttl, .on_lost = [&](const LossEvent&) { ++losses; }});
    ASSERT_TRUE(lock.try_lock()) << what;
    if (c.sigstop) {
      server.pause();
      std::this_thread::sleep_for(c.stall);
      server.resume();
    } else {
      RawConnection staller = server.connect();
      staller.set_command_timeout(5s);
      const std::string seconds = std::to_string(static_cast<double>(c.stall.count()) / 1000.0);
      staller.command({"DEBUG", "SLEEP", seconds});
    }
    expect_held_throughout(lock, server, name, 2 * c.ttl, what);
    EXPECT_EQ(losses.load(), 0) << what;
    lock.unlock();
    EXPECT_EQ(lock.last_unlock_error(), nullptr) << what;
    // The check ran (it may have timed out in the stall: then no warning).
    std::printf("[attack9] %s: lease kept, eviction warnings %zu\n", what.c_str(),
                warnings.count(topic_of(server.host(), server.port())));
  }
}

// CONFIG renamed away: the check gets an error, says nothing, and the locks
// renew as usual (the server may evict: the check cannot know).
TEST(EvictionAttack, RenamedConfigMeansNoWarningAndNormalRenewals) {
  std::vector<std::string> args{"--rename-command", "CONFIG", ""};
  args.insert(args.end(), kMayEvict.begin(), kMayEvict.end());
  RedisServer server({.extra_args = args});
  ASSERT_TRUE(server.command({"CONFIG", "GET", "maxmemory"}).is_error()) << "CONFIG was not renamed";
  WarningLog warnings;
  FaultProxy proxy(server.host(), server.port());
  const int config = proxy.add_rule({.command = "CONFIG", .action = FaultAction::pass});
  const Client client(proxy.url());
  const std::string name = unique_key("renamed");
  Lock lock(client, name, {.ttl = 600ms});
  ASSERT_TRUE(lock.try_lock());
  expect_held_throughout(lock, server, name, 1800ms, "renamed CONFIG");
  EXPECT_GE(proxy.matched(config), 1u) << "the check never asked";
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_EQ(warnings.count(topic_of(proxy.host(), proxy.port())), 0u);
}

// CONFIG GET answered 2 s late (a proxy delay rule): the check gives up at
// 300 ms, no warning, renewals go on, and the late answer is never taken for
// another command's reply (the pool is used for everything: auto_pipeline=0).
TEST(EvictionAttack, SlowConfigGetMeansNoWarningNoLossAndNoStrayReply) {
  RedisServer server({.extra_args = kMayEvict});
  WarningLog warnings;
  FaultProxy proxy(server.host(), server.port());
  const int config = proxy.add_rule({.command = "CONFIG", .action = FaultAction::delay, .delay = 2s});
  const Client client(proxy.url() + "?auto_pipeline=0");
  const std::string name = unique_key("slow-config");
  Lock lock(client, name, {.ttl = 600ms});
  ASSERT_TRUE(lock.try_lock());
  // Meanwhile other locks on the same pool, with values checked.
  std::atomic<int> wrong{0}, cycles{0};
  std::thread other([&] {
    const auto until = Clock::now() + 2500ms;
    for (int i = 0; i < 10'000 && Clock::now() < until; ++i) {
      Lock l(client, name + ":other", {.ttl = 5s, .auto_renew = false});
      try {
        if (!l.try_lock()) ++wrong;  // nobody else holds it
        else if (!l.owned()) ++wrong;
        l.unlock();
        if (l.last_unlock_error() != nullptr) ++wrong;
        if (client.command({"ECHO", "echo-" + std::to_string(i)}).as_string() != "echo-" + std::to_string(i)) ++wrong;
      } catch (const Error&) {
        ++wrong;
      }
      ++cycles;
      std::this_thread::sleep_for(5ms);
    }
  });
  expect_held_throughout(lock, server, name, 2500ms, "CONFIG GET 2 s late");
  other.join();
  EXPECT_GE(proxy.matched(config), 1u) << "the check never asked";
  EXPECT_EQ(wrong.load(), 0) << "of " << cycles.load() << " cycles on the same pool";
  EXPECT_GT(cycles.load(), 20);
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_EQ(warnings.count(topic_of(proxy.host(), proxy.port())), 0u) << "a warning from a reply that came too late";
}

}  // namespace
}  // namespace lockon::test
