// integration/sentinel_failover_support.hpp — the Sentinel failover set-up
// shared by the replica-wake tests (test_sentinel_replica_wake.cpp,
// test_async_sentinel_replica_wake.cpp): a waiter queued on the first
// master, SENTINEL FAILOVER, the old master demoted, a client that follows.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {

/// LLEN of `key` on `server`; -1 if it cannot be read (e.g. mid-switch).
inline long long llen(RedisServer& server, const std::string& key) {
  try {
    const RawReply r = server.command({"LLEN", key});
    return r.type == RawReply::Type::integer ? r.integer : -1;
  } catch (...) {
    return -1;
  }
}

/// Polls `done` every 20 ms for at most `timeout`.
template <typename F>
bool eventually(std::chrono::milliseconds timeout, F&& done) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

/// Whether `queue` holds `length` entries on the master and, replicated, on
/// the replica: a waiter's entry must survive the failover that follows.
inline ::testing::AssertionResult queued_on_master_and_replica(SentinelSet& set, RedisServer& master,
                                                                const std::string& queue, long long length) {
  using namespace std::chrono_literals;
  if (!eventually(5s, [&] { return llen(master, queue) == length; }))
    return ::testing::AssertionFailure() << "the waiter did not queue on the first master (LLEN "
                                         << llen(master, queue) << ")";
  if (!eventually(5s, [&] { return llen(set.replica(), queue) == length; }))
    return ::testing::AssertionFailure() << "the waiter's entry did not replicate";
  return ::testing::AssertionSuccess();
}

/// SENTINEL FAILOVER, then waits until the replica is promoted and the
/// sentinels have demoted the old master (REPLICAOF the new one, CLIENT KILL
/// TYPE pubsub: a few seconds after the promotion), its link up. The new
/// master's port in `new_port`.
inline ::testing::AssertionResult fail_over_and_demote(SentinelSet& set, int old_port, int& new_port) {
  using namespace std::chrono_literals;
  new_port = 0;
  if (!set.sentinel_command({"SENTINEL", "FAILOVER", SentinelSet::kMasterName}).is("OK"))
    return ::testing::AssertionFailure() << "SENTINEL FAILOVER refused:\n" << set.logs();
  new_port = set.wait_for_new_master(old_port, 30s);
  if (new_port == 0) return ::testing::AssertionFailure() << "no failover:\n" << set.logs();
  RedisServer& old_master = set.server_on(old_port);
  const bool demoted = eventually(40s, [&] {
    try {
      const RawReply info = old_master.command({"INFO", "replication"});
      return info.str.find("role:slave") != std::string::npos &&
             info.str.find("master_link_status:up") != std::string::npos;
    } catch (...) {
      return false;
    }
  });
  if (!demoted) return ::testing::AssertionFailure() << "the sentinels did not demote the old master:\n" << set.logs();
  return ::testing::AssertionSuccess();
}

/// Waits (≤ 10 s) until `client`'s calls run on the server on `port`: it
/// followed the switch (a release must run on the new master).
inline bool follows_to(const Client& client, int port) {
  using namespace std::chrono_literals;
  return eventually(10s, [&] {
    try {
      return client.command({"INFO", "server"}).as_string().find("tcp_port:" + std::to_string(port)) !=
             std::string::npos;
    } catch (...) {
      return false;
    }
  });
}

}  // namespace lockon::test
