// integration/sentinel_failover_support.hpp — the Sentinel failover set-up
// shared by the replica-wake tests (test_sentinel_replica_wake.cpp,
// test_async_sentinel_replica_wake.cpp): a waiter queued on the first
// master, SENTINEL FAILOVER, the old master demoted, a client that follows;
// by the failover-window tests (test_sentinel_failover_window.cpp,
// test_async_sentinel_failover_window.cpp): when a replica was promoted, and
// which sentinels a client listens on; and by the move-deadline tests
// (test_sentinel_move_deadline.cpp): which lock a scenario runs on.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include <atomic>
#include <mutex>

#include "lockon/client.hpp"
#include "support/fixtures.hpp"
#include "support/raw_connection.hpp"
#include "support/sentinel_fixture.hpp"

namespace lockon::test {

/// Which exclusive lock a failover scenario runs on: a Lock, or a
/// ReadWriteLock's writer side (the shared locks' hand-over:
/// shared_holder.cpp).
enum class ExclusiveKind { lock, writer };

/// Whether `server` answers ROLE "slave" (a master demoted by hand or by the sentinels).
inline bool is_replica(RedisServer& server) {
  const RawReply role = server.command({"ROLE"});
  return !role.elements.empty() && role.elements[0].str == "slave";
}

/// LLEN of `key` on `server`; -1 if it cannot be read (e.g. mid-switch).
inline long long llen(RedisServer& server, const std::string& key) {
  try {
    const RawReply r = server.command({"LLEN", key});
    return r.type == RawReply::Type::integer ? r.integer : -1;
  } catch (...) {
    return -1;
  }
}

/// Whether `queue` holds `length` entries on the master and, replicated, on
/// the replica: a waiter's entry must survive the failover that follows.
inline ::testing::AssertionResult queued_on_master_and_replica(SentinelSet& set, RedisServer& master,
                                                                const std::string& queue, long long length) {
  using namespace std::chrono_literals;
  // Each look opens a connection: every 20 ms, not fixtures.hpp's 2 ms.
  if (!eventually(5s, [&] { return llen(master, queue) == length; }, 20ms))
    return ::testing::AssertionFailure() << "the waiter did not queue on the first master (LLEN "
                                         << llen(master, queue) << ")";
  if (!eventually(5s, [&] { return llen(set.replica(), queue) == length; }, 20ms))
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
  }, 20ms);
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
  }, 20ms);
}

/// Watches the replicas of `set` (ROLE every 5 ms, on a thread) from
/// construction: the first that says "master" was promoted then. Bounded:
/// it stops after `limit`, or when destroyed.
class PromotionWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit PromotionWatch(SentinelSet& set, std::chrono::milliseconds limit = std::chrono::seconds(40)) {
    std::vector<int> ports;
    for (std::size_t i = 0; i < set.replica_count(); ++i) ports.push_back(set.replica(i).port());
    thread_ = std::thread([this, ports, limit] {
      std::vector<std::unique_ptr<RawConnection>> links(ports.size());
      const auto until = Clock::now() + limit;
      while (!stop_ && Clock::now() < until) {
        for (std::size_t i = 0; i < ports.size(); ++i) {
          try {
            if (!links[i])
              links[i] = std::make_unique<RawConnection>(
                  "127.0.0.1", ports[i],
                  RawConnectOptions{.connect_timeout = std::chrono::milliseconds(300),
                                    .command_timeout = std::chrono::milliseconds(1000)});
            const RawReply role = links[i]->command({"ROLE"});
            if (!role.elements.empty() && role.elements[0].str == "master") {
              std::lock_guard lock(mutex_);
              at_ = Clock::now();
              port_ = ports[i];
              return;
            }
          } catch (...) {
            links[i].reset();
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  ~PromotionWatch() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  PromotionWatch(const PromotionWatch&) = delete;
  PromotionWatch& operator=(const PromotionWatch&) = delete;
  /// Waits for the promotion; the promoted replica's port (0: none).
  int wait() {
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    return port_;
  }
  Clock::time_point promoted_at() {
    std::lock_guard lock(mutex_);
    return at_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  Clock::time_point at_{};
  int port_ = 0;
  std::thread thread_;
};

/// How many clients of sentinel `i` are subscribed to something (CLIENT
/// LIST's sub=); -1 if it cannot be read.
inline int subscribed_clients(SentinelSet& set, std::size_t i) {
  try {
    const RawReply list = set.sentinel_command_at(i, {"CLIENT", "LIST"});
    int count = 0;
    for (std::size_t at = list.str.find(" sub="); at != std::string::npos; at = list.str.find(" sub=", at + 1))
      if (list.str.compare(at, 7, " sub=0 ") != 0) ++count;
    return count;
  } catch (...) {
    return -1;
  }
}

/// Waits (≤ 10 s) until every sentinel of `set` has at least `clients`
/// subscribed clients: the clients under test listen on all of them.
inline bool listened_on_every_sentinel(SentinelSet& set, int clients) {
  using namespace std::chrono_literals;
  return eventually(10s, [&] {
    for (std::size_t i = 0; i < set.sentinel_count(); ++i)
      if (subscribed_clients(set, i) < clients) return false;
    return true;
  }, 20ms);
}

}  // namespace lockon::test
