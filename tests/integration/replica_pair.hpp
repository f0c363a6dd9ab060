// integration/replica_pair.hpp — a real master and a real replica
// (replicaof) in sync, for the replica_acks tests of both fronts
// (test_replica_acks.cpp, test_async_replica_acks.cpp).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "lockon/lock.hpp"
#include "support/redis_server.hpp"

namespace lockon::test {

struct ReplicaPair {
  RedisServer master;
  RedisServer replica;
  // No 5 s delay before the replica's first (diskless) sync.
  ReplicaPair()
      : master(ServerOptions{.extra_args = {"--repl-diskless-sync-delay", "0"}}),
        replica(ServerOptions{.extra_args = {"--replicaof", "127.0.0.1", std::to_string(master.port())}}) {
    using namespace std::chrono_literals;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (replica.command({"INFO", "replication"}).str.find("master_link_status:up") == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) throw std::runtime_error("replica did not sync: " + replica.log_tail());
      std::this_thread::sleep_for(20ms);
    }
    // The replica's link is up before the master puts it online (on its
    // first REPLCONF ACK after loading): a WAIT in between counted 0 of 1
    // (1 run in ~27 of AcquisitionAcknowledgedIsOnTheReplica).
    while (master.command({"INFO", "replication"}).str.find("state=online") == std::string::npos) {
      if (std::chrono::steady_clock::now() > until)
        throw std::runtime_error("master never saw its replica online: " + master.log_tail());
      std::this_thread::sleep_for(20ms);
    }
  }
};

/// Pauses the pair's replica (SIGSTOP) until destroyed: no WAIT is
/// acknowledged meanwhile.
class PausedReplica {
 public:
  explicit PausedReplica(ReplicaPair& pair) : replica_(pair.replica) { replica_.pause(); }
  ~PausedReplica() { replica_.resume(); }
  PausedReplica(const PausedReplica&) = delete;
  PausedReplica& operator=(const PausedReplica&) = delete;

 private:
  RedisServer& replica_;
};

/// A 10 s lease acknowledged by `replicas` replicas within `timeout`.
inline LockOptions with_acks(int replicas, std::chrono::milliseconds timeout) {
  LockOptions options;
  options.ttl = std::chrono::seconds(10);
  options.replica_acks = {replicas, timeout};
  return options;
}

}  // namespace lockon::test
