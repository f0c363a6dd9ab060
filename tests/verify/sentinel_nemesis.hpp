// verify/sentinel_nemesis.hpp — the Sentinel topology's faults (fault_kinds.hpp):
// sentinel_failover, master_kill (the killed master comes back later as a
// replica: master_restart), master_stall_short / master_stall_long, and the
// worker faults of every topology (Nemesis).
//
// A fault that promoted a replica ends when the RoleWatcher saw the
// promotion; the nemesis then waits (bounded) until every sentinel names the
// new master, and before the next fault of a server until the whole
// deployment settled (the old master reconfigured as a replica), so that
// each failover's window is measured alone.
#pragma once
#include <chrono>

#include "nemesis.hpp"
#include "role_watcher.hpp"
#include "sentinel_cluster.hpp"

namespace lockon::verify {

class SentinelNemesis final : public Nemesis {
 public:
  SentinelNemesis(SentinelCluster& cluster, RoleWatcher& roles, std::chrono::milliseconds failover_timeout,
                  std::uint64_t seed, std::chrono::milliseconds ttl, LineLog& log)
      : Nemesis(cluster.workers(), kSentinel, seed, ttl, log),
        cluster_(cluster),
        roles_(roles),
        failover_timeout_(failover_timeout) {}

 private:
  void inject_server_fault(std::string_view kind) override;
  /// Restarts a killed master whose time came.
  void before_fault() override;
  /// The master's index, after restarting a killed one if the sentinels
  /// still name it (no failover happened); -1 if none.
  int live_master();
  void restart_dead();
  /// After a promotion (of `promoted`, 0: none): until every live sentinel
  /// names a master other than `old_port` (bounded).
  void settle(int promoted, int old_port);
  /// Before each fault of a server: restarts a killed master not yet back,
  /// then waits until the deployment has settled
  /// (SentinelCluster::settled_master), bounded; a fault on a deployment
  /// still failing over tests Sentinel's own split brain, not the clients.
  /// Logs `settle_timeout` when the bound passed.
  void wait_settled();

  SentinelCluster& cluster_;
  RoleWatcher& roles_;
  std::chrono::milliseconds failover_timeout_;
  int dead_ = -1;  // index of the killed data server, if one is down
  std::chrono::steady_clock::time_point restart_due_{};
};

}  // namespace lockon::verify
