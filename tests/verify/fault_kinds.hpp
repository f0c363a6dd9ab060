// verify/fault_kinds.hpp — every fault the nemesis injects, with the outcome
// it must have (docs/verification.md repeats the table). Apart from
// nemesis.hpp so that the checker, and its unit tests, need no cluster.
#pragma once
#include <string_view>

namespace lockon::verify {

struct FaultKind {
  std::string_view name;
  /// True when the fault may legitimately break mutual exclusion (the checker
  /// then classifies an overlap it covers as allowed — provided the stale
  /// holder saw the loss and the resource refused it).
  bool may_break_exclusion;
  std::string_view expected;
  /// The topologies whose nemesis draws it (kStandalone | kSentinel |
  /// kCluster), in this table's order (a seed's schedule depends on it: new
  /// kinds go at the end); 0: never drawn, an event the harness observes (a
  /// promotion) or a step of another fault.
  unsigned topologies;
};

inline constexpr unsigned kStandalone = 1;
inline constexpr unsigned kSentinel = 2;
inline constexpr unsigned kCluster = 4;

inline constexpr FaultKind kFaults[] = {
    {"pause_short", false, "SIGSTOP of a worker for < TTL: renewal resumes in time; no overlap, no loss",
     kStandalone | kSentinel | kCluster},
    {"pause_long", true, "SIGSTOP of a worker for > TTL: its leases may lapse and others take the keys (allowed "
                         "overlap); the resource refuses its stale accesses; it sees lost()/LockNotOwned/LockLost",
     kStandalone | kSentinel | kCluster},
    {"kill_worker", false, "SIGKILL of a worker (restarted): its keys are free again within one TTL; no overlap",
     kStandalone | kSentinel | kCluster},
    {"stall_lock", true, "SIGSTOP of the lock server for 0.3-1.5 TTL: calls fail within deadline + tolerance; "
                         "beyond one TTL leases may lapse (allowed overlap, holder sees the loss); progress "
                         "resumes within one TTL after SIGCONT",
     kStandalone},
    {"stall_node", false, "SIGSTOP of one Redlock node: the majority carries on; no overlap",
     kStandalone},
    {"restart_persistent", false, "kill -9 + restart of the lock server with its AOF (appendfsync always): "
                                  "keys and fence counters survive; no overlap; fences keep increasing",
     kStandalone},
    {"restart_empty", true, "kill -9 + restart of the lock server without its data: exclusion may break "
                            "(allowed overlap); the resource must refuse every stale access, the old holder must "
                            "see the loss, and fences must still increase",
     kStandalone},
    {"node_down", false, "one Redlock node killed, down longer than one TTL, restarted empty: a minority; "
                         "no overlap; fences keep increasing",
     kStandalone},
    {"proxy_error", false, "error replies (OOM/READONLY/NOPERM/LOADING/BUSY/TRYAGAIN) on lock commands: the call "
                           "fails with that ReplyError or retries; no overlap; the pooled connection stays in step",
     kStandalone},
    {"proxy_close", false, "connection closed before forwarding / after forwarding / mid-reply on a lock command: "
                           "IoError; a lock whose SET went through is freed within one TTL; no overlap",
     kStandalone},
    {"partition", true, "blackhole of one lock server's proxy for 0.3-1.5 TTL: calls time out within deadline + "
                        "tolerance; on the single server beyond one TTL leases may lapse (allowed overlap, "
                        "holder sees the loss); for a Redlock node (minority) no overlap",
     kStandalone},
    {"latency", false, "1-20 ms each way on one proxy for a few seconds: slower, no overlap",
     kStandalone},
    {"drop", false, "every proxied connection of one server dropped: calls fail or reconnect; no overlap",
     kStandalone},
    // The Sentinel topology (--topology sentinel): a master, 2 replicas, 3
    // sentinels (down-after 1 s), workers listing the sentinels in rotated
    // orders. Every failover is also logged as the `promotion` it caused.
    // Each fault of a server waits until the deployment settled (one master
    // named by every sentinel, no failover in progress, the others its
    // replicas; else a settle_timeout record).
    {"sentinel_failover", true, "SENTINEL FAILOVER sent to a random sentinel: a replica is promoted while the old "
                                "master still runs; exclusion may break only through the promotion (see promotion)",
     kSentinel},
    {"master_kill", true, "SIGKILL of the master, restarted empty as a replica of the new master after 0.5-6 s "
                          "(at the latest before the next fault of a server): "
                          "calls fail within deadline + tolerance; writes not yet replicated are lost, so exclusion "
                          "may break through the promotion (see promotion); progress resumes within one TTL after it",
     kSentinel},
    {"master_stall_short", false, "SIGSTOP of the master for less than down-after (0.3-0.8 s; in a Cluster of one "
                                  "master, well below cluster-node-timeout, 2 s): no failover; leases outlive it; no "
                                  "overlap; calls fail within deadline + tolerance",
     kSentinel | kCluster},
    {"master_stall_long", true, "SIGSTOP of the master for longer than down-after (1.3-3 s): the sentinels may promote "
                                "a replica; leases may lapse as for stall_lock; exclusion may break through the "
                                "promotion; progress resumes within one TTL after SIGCONT",
     kSentinel},
    {"master_restart", false, "the master killed by master_kill comes back (empty) as a replica of the new master: "
                              "no section runs on it",
     0},
    {"promotion", true, "observed (ROLE polled every 20 ms): a replica became master. Holders granted on the old "
                        "master up to the window (--failover-window-ms, 1 s) after it may overlap holders on the new "
                        "one (async replication, clients still following the old master); the stale holder must "
                        "see the loss or the resource refuse its fence; no section may be granted on the old master "
                        "later than the window after the promotion, whatever the sentinels name "
                        "(old_master_grant); progress resumes within one TTL",
     0},
    {"demotion", false, "observed: a server that was master now says slave (the old master reconfigured)", 0},
    {"unnamed", false, "observed: no sentinel names this server as master any more (for reading the history)",
     0},
    {"named", false, "observed: a sentinel names this server as master again", 0},
    {"settle_timeout", false, "the deployment did not settle (every sentinel naming one master, no failover in "
                              "progress, every other data server its replica) within 2 x failover-timeout + 15 s "
                              "before a fault of a server (Cluster: every node agreeing on roles, epochs and slots, "
                              "replicas in sync, within 10 s); the fault is injected anyway",
     0},
    // The Cluster topology (--topology cluster): 3 masters with a replica
    // each (cluster-node-timeout 2 s), workers given every node in one
    // redis-cluster:// URL; master_stall_short and the worker faults above
    // are drawn too. Each fault of a server waits until the cluster settled
    // (else a settle_timeout record).
    {"slot_migration", false, "the slot of one of the workers' keys (its companion keys share it) moved to another "
                              "master step by step: MIGRATING/IMPORTING held 0.2-1.5 s, the keys MIGRATEd, held "
                              "0.05-0.5 s, SETSLOT NODE: ASK/TRYAGAIN followed within deadlines, no script fails "
                              "half-way; no overlap",
     kCluster},
    {"cluster_failover", false, "CLUSTER FAILOVER on a master's replica (coordinated: the master holds its clients "
                                "until the replica caught up, no write lost): MOVED followed; no overlap",
     kCluster},
};

inline const FaultKind* find_fault_kind(std::string_view name) {
  for (const auto& kind : kFaults)
    if (kind.name == name) return &kind;
  return nullptr;
}

}  // namespace lockon::verify
