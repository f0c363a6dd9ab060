// support/sentinel_fixture.hpp — a real Sentinel deployment for tests: one
// master, one replica (or more: SentinelSetOptions) (replicaof), three sentinels (`redis-server <conf>
// --sentinel`, quorum 2, down-after 1000 ms, failover-timeout 5000 ms), all
// on free loopback ports, each in its own temporary directory, stopped by
// PID. The constructor waits (bounded) until every sentinel knows the master
// and the replica and the other sentinels; it throws with the logs if not.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.hpp"

namespace lockon::test {

/// URL query for clients that must notice a stopped or switched master
/// quickly: 300 ms to connect, 300 ms per reply (SentinelSet::url(query)).
inline const std::string kShortTimeouts = "?connect_timeout=300&socket_timeout=300";

// Every member has a default initializer (designated initializers, GCC 12).
struct SentinelSetOptions {
  /// Called once the replica is in sync, before any sentinel starts: the
  /// port the replica is to announce (replica-announce-port), e.g. that of
  /// a FaultProxy in front of it; 0 keeps its own. The sentinels then reach
  /// it there, and after a failover name the master at that port: clients
  /// talk to the new master through the proxy.
  std::function<int(RedisServer& replica)> replica_announced_port{};
  /// Replicas of the master (1 or more). With two, the sentinel leading a
  /// failover publishes +switch-master only once it has reconfigured the
  /// other replica (seconds after the promotion).
  std::size_t replicas = 1;
  /// sentinel failover-timeout.
  std::chrono::milliseconds failover_timeout{5000};
  /// The replicas' repl-diskless-sync-delay (the master's is 0): how long a
  /// promoted replica waits before it serves the other replicas' sync. 0
  /// makes failovers quick; Redis's default, 5 s, makes the failover's
  /// leader publish +switch-master ~6 s after the promotion, as in the
  /// field.
  std::chrono::seconds replica_sync_delay{0};
};

class SentinelSet {
 public:
  static constexpr const char* kMasterName = "mymaster";

  SentinelSet() : SentinelSet(SentinelSetOptions{}) {}
  explicit SentinelSet(SentinelSetOptions options);
  ~SentinelSet();
  SentinelSet(const SentinelSet&) = delete;
  SentinelSet& operator=(const SentinelSet&) = delete;

  RedisServer& master() { return *servers_[0]; }
  RedisServer& replica() { return *servers_[1]; }
  /// Replica i (0: replica()).
  RedisServer& replica(std::size_t i) { return *servers_.at(1 + i); }
  std::size_t replica_count() const { return servers_.size() - 1; }
  /// The data server listening on `port` (master or replica).
  RedisServer& server_on(int port);
  std::size_t sentinel_count() const { return sentinels_.size(); }
  int sentinel_port(std::size_t i) const { return sentinels_.at(i).port; }
  /// SIGKILLs sentinel i (the port then refuses).
  void kill_sentinel(std::size_t i);

  /// "redis-sentinel://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c#mymaster" plus
  /// `query` ("?socket_timeout=300") if given.
  std::string url(const std::string& query = "") const;
  /// The same, listing the sentinels in `order` (indexes).
  std::string url_in_order(const std::vector<std::size_t>& order, const std::string& query = "") const;
  /// One command to sentinel i.
  RawReply sentinel_command_at(std::size_t i, const std::vector<std::string>& args);
  /// The master's port according to the first live sentinel (0 if none).
  int master_port_by_sentinel();
  /// One command to the first live sentinel.
  RawReply sentinel_command(const std::vector<std::string>& args);
  /// Waits until every live sentinel names master port != `old_port`, and
  /// that server's ROLE says master. Returns the new port (0 on timeout).
  int wait_for_new_master(int old_port, std::chrono::milliseconds timeout);
  /// Waits until the live sentinels see `replicas` replicas of the master.
  bool wait_for_replicas(std::size_t replicas, std::chrono::milliseconds timeout);
  std::string logs() const;

  // For tests/verify's Sentinel topology, which kills and restarts masters.
  /// Data server i: 0 the first master, 1.. the replicas (after failovers
  /// any of them may be the master: ask ROLE).
  RedisServer& data_server(std::size_t i) { return *servers_.at(i); }
  std::size_t data_server_count() const { return servers_.size(); }
  /// Starts the killed data server i again (empty: nothing is persisted) and
  /// makes it a replica of `master_port` (REPLICAOF) before returning, as a
  /// crashed old master rejoins. Until that REPLICAOF it is an empty master
  /// for a moment; no sentinel names it then.
  void restart_as_replica_of(std::size_t i, int master_port);

 private:
  struct Sentinel {
    int port = 0;
    pid_t pid = -1;
    std::filesystem::path dir;
  };
  void start_sentinel(Sentinel& sentinel);
  void announce_replica_at(int port);

  std::chrono::milliseconds failover_timeout_{5000};
  std::vector<std::unique_ptr<RedisServer>> servers_;
  std::vector<Sentinel> sentinels_;
};

}  // namespace lockon::test
