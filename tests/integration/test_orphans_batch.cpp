// integration/test_orphans_batch.cpp — the background clean-up of abandoned
// attempts (src/lock/orphans.hpp) after a storm: a server stall leaves
// thousands of them at once (AutoPipelineAttack's orphan test: ~2,000 per
// 300 ms of 2 ms attempts), and each may hold its key. Cleaned one round
// trip at a time, the last key waited for all the others; the clean-ups now
// go out in pipelines (Orphans::kBatch per server per round), each client's
// on a lane (thread) of its own.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/lock_scripts.hpp"
#include "lock/orphans.hpp"
#include "lockon/client.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using detail::Orphans;

class OrphansBatch : public ClientTest {};

// Attacks: 2,000 keys, each held by the token of an acquisition whose
// caller gave up (what a stall leaves behind), adopted at once, on a client
// whose server is 2 ms of round trip away (FaultProxy latency). Every key
// must be freed (the clean-up deletes a key its orphan holds) within 1 s:
// one round trip per orphan would take 2,000 x 2 ms = 4 s at least.
// Sabotage: Orphans::kBatch = 1 took 4.4 s (batched: ~200 ms).
TEST_F(OrphansBatch, ThousandsOfOrphansAreFreedInAFewRoundTrips) {
  constexpr int kOrphans = 2000;
  FaultProxy proxy(server().host(), server().port());
  proxy.set_latency(1ms);
  const Client distant(proxy.url());
  distant.ping();
  std::vector<std::string> keys;
  keys.reserve(kOrphans);
  for (int i = 0; i < kOrphans; ++i) {
    keys.push_back(key("orphan-" + std::to_string(i)));
    raw({"SET", keys.back(), "token-" + std::to_string(i), "PX", "60000"});
  }
  std::vector<std::string> exists{"EXISTS"};
  exists.insert(exists.end(), keys.begin(), keys.end());
  ASSERT_EQ(raw(exists).integer, kOrphans);
  const std::size_t pending_before = Orphans::instance().pending();
  const auto adopted = std::chrono::steady_clock::now();
  for (int i = 0; i < kOrphans; ++i) {
    // Known outcome: one sweep each. Entry "<sid>|<waiter id>|<ttl>|<fenced>|<token>"
    // without a queue place, as Lock::Impl::orphan_entry makes it.
    Orphans::instance().adopt(detail::Orphan{distant.impl(), detail::lock_script_keys(keys[i]),
                                             "-|-|60000|0|token-" + std::to_string(i), false});
  }
  const bool freed = eventually(10s, [&] { return raw(exists).integer == 0; });
  const long long took = ms_since(adopted);
  std::printf("[orphans] %d orphan-held keys freed %lld ms after adoption (2 ms round trips)\n", kOrphans, took);
  ASSERT_TRUE(freed) << raw(exists).integer << " keys still held 10 s after adoption";
  EXPECT_LT(took, 1000) << "the clean-ups went one round trip at a time";
  EXPECT_TRUE(eventually(2s, [&] { return Orphans::instance().pending() <= pending_before; }))
      << Orphans::instance().pending() << " orphans still pending";
}

// Attacks: the same storm, but each orphan's key now holds another owner's
// token (the key expired and was taken since). The clean-up must remove
// nothing that is not its own: every key keeps its new owner.
TEST_F(OrphansBatch, ABatchNeverDeletesAKeyTakenByAnotherOwner) {
  constexpr int kOrphans = 500;
  std::vector<std::string> keys;
  for (int i = 0; i < kOrphans; ++i) {
    keys.push_back(key("taken-" + std::to_string(i)));
    raw({"SET", keys.back(), "new-owner-" + std::to_string(i), "PX", "60000"});
  }
  const std::size_t pending_before = Orphans::instance().pending();
  for (int i = 0; i < kOrphans; ++i)
    Orphans::instance().adopt(detail::Orphan{client().impl(), detail::lock_script_keys(keys[i]),
                                             "-|-|60000|0|old-token-" + std::to_string(i), false});
  ASSERT_TRUE(eventually(5s, [&] { return Orphans::instance().pending() <= pending_before; }))
      << "the clean-ups never finished";
  for (int i = 0; i < kOrphans; ++i) ASSERT_EQ(value(keys[i]), "new-owner-" + std::to_string(i)) << keys[i];
}

// Attacks: a second server is partitioned (FaultProxy blackhole: connects
// and reads hang until their timeouts) while orphans of its keys wait for
// their clean-up, retried with back-off. Orphans of the healthy server
// adopted meanwhile must be freed as fast as without the dead one, not wait
// behind its timeouts round after round. Failed with one clean-up thread
// for all clients: 612-1025 ms (its connect and socket timeouts, 1 s);
// with a lane per client: 21 ms, as when quiet.
TEST_F(OrphansBatch, APartitionedServerDoesNotDelayAnotherServersOrphans) {
  RedisServer other;
  FaultProxy proxy(other.host(), other.port());
  const Client dead(proxy.url());
  dead.ping();
  for (int i = 0; i < 20; ++i) {
    const std::string name = key("dead-" + std::to_string(i));
    other.command({"SET", name, "dead-token-" + std::to_string(i), "PX", "60000"});
  }
  proxy.blackhole(true);
  proxy.drop_connections();  // its pooled connections too: every clean-up must dial
  for (int i = 0; i < 20; ++i)
    Orphans::instance().adopt(detail::Orphan{dead.impl(), detail::lock_script_keys(key("dead-" + std::to_string(i))),
                                             "-|-|60000|0|dead-token-" + std::to_string(i), false});
  std::vector<long long> freed_ms;
  for (int round = 0; round < 5; ++round) {
    const std::string name = key("alive-" + std::to_string(round));
    raw({"SET", name, "alive-token", "PX", "60000"});
    const auto adopted = std::chrono::steady_clock::now();
    Orphans::instance().adopt(
        detail::Orphan{client().impl(), detail::lock_script_keys(name), "-|-|60000|0|alive-token", false});
    ASSERT_TRUE(eventually(5s, [&] { return !exists(name); })) << "round " << round;
    freed_ms.push_back(ms_since(adopted));
    std::this_thread::sleep_for(std::chrono::milliseconds(137 * round));
  }
  proxy.blackhole(false);
  std::string all;
  for (long long ms : freed_ms) all += " " + std::to_string(ms);
  std::printf("[orphans] healthy server's orphans freed after (ms):%s, beside a partitioned server\n", all.c_str());
  for (long long ms : freed_ms) EXPECT_LT(ms, 300) << "freed after:" << all;
}

// Attacks: 40 clients (as many lanes wanted) with orphans at once, each
// behind 2 ms round trips. At most Orphans::kMaxLanes lanes (threads) may
// be at work together, and every key must still be freed promptly (the
// clients beyond wait for a lane to end: 40 / 8 rounds of ~2-5 ms).
// Sabotage, the cap's condition removed: 40 lanes at once (caught).
TEST_F(OrphansBatch, ManyClientsShareABoundedNumberOfLanes) {
  constexpr int kClients = 40;
  FaultProxy proxy(server().host(), server().port());
  proxy.set_latency(1ms);
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::make_unique<Client>(proxy.url()));
    clients.back()->ping();
  }
  std::vector<std::string> exists{"EXISTS"};
  for (int c = 0; c < kClients; ++c) {
    for (int i = 0; i < 5; ++i) {
      exists.push_back(key("many-" + std::to_string(c) + "-" + std::to_string(i)));
      raw({"SET", exists.back(), "token", "PX", "60000"});
    }
  }
  const auto adopted = std::chrono::steady_clock::now();
  for (int c = 0; c < kClients; ++c)
    for (int i = 0; i < 5; ++i)
      Orphans::instance().adopt(detail::Orphan{clients[c]->impl(),
                                               detail::lock_script_keys(exists[1 + 5 * c + i]),
                                               "-|-|60000|0|token", false});
  ASSERT_TRUE(eventually(10s, [&] { return raw(exists).integer == 0; }))
      << raw(exists).integer << " keys still held 10 s after adoption";
  const long long took = ms_since(adopted);
  std::printf("[orphans] %d clients' orphans freed after %lld ms; at most %zu lanes at once\n", kClients, took,
              Orphans::instance().peak_lanes());
  EXPECT_LE(Orphans::instance().peak_lanes(), Orphans::kMaxLanes);
  EXPECT_GE(Orphans::instance().peak_lanes(), 2u) << "the lanes never ran side by side: the test proves nothing";
  EXPECT_LT(took, 1000);
}

}  // namespace
}  // namespace lockon::test
