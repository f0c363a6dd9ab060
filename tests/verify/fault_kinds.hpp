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
};

inline constexpr FaultKind kFaults[] = {
    {"pause_short", false, "SIGSTOP of a worker for < TTL: renewal resumes in time; no overlap, no loss"},
    {"pause_long", true, "SIGSTOP of a worker for > TTL: its leases may lapse and others take the keys (allowed "
                         "overlap); the resource refuses its stale accesses; it sees lost()/LockNotOwned/LockLost"},
    {"kill_worker", false, "SIGKILL of a worker (restarted): its keys are free again within one TTL; no overlap"},
    {"stall_lock", true, "SIGSTOP of the lock server for 0.3-1.5 TTL: calls fail within deadline + tolerance; "
                         "beyond one TTL leases may lapse (allowed overlap, holder sees the loss); progress "
                         "resumes within one TTL after SIGCONT"},
    {"stall_node", false, "SIGSTOP of one Redlock node: the majority carries on; no overlap"},
    {"restart_persistent", false, "kill -9 + restart of the lock server with its AOF (appendfsync always): "
                                  "keys and fence counters survive; no overlap; fences keep increasing"},
    {"restart_empty", true, "kill -9 + restart of the lock server without its data: exclusion may break "
                            "(allowed overlap); the resource must refuse every stale access, the old holder must "
                            "see the loss, and fences must still increase"},
    {"node_down", false, "one Redlock node killed, down longer than one TTL, restarted empty: a minority; "
                         "no overlap; fences keep increasing"},
    {"proxy_error", false, "error replies (OOM/READONLY/NOPERM/LOADING/BUSY/TRYAGAIN) on lock commands: the call "
                           "fails with that ReplyError or retries; no overlap; the pooled connection stays in step"},
    {"proxy_close", false, "connection closed before forwarding / after forwarding / mid-reply on a lock command: "
                           "IoError; a lock whose SET went through is freed within one TTL; no overlap"},
    {"partition", true, "blackhole of one lock server's proxy for 0.3-1.5 TTL: calls time out within deadline + "
                        "tolerance; on the single server beyond one TTL leases may lapse (allowed overlap, "
                        "holder sees the loss); for a Redlock node (minority) no overlap"},
    {"latency", false, "1-20 ms each way on one proxy for a few seconds: slower, no overlap"},
    {"drop", false, "every proxied connection of one server dropped: calls fail or reconnect; no overlap"},
};

inline const FaultKind* find_fault_kind(std::string_view name) {
  for (const auto& kind : kFaults)
    if (kind.name == name) return &kind;
  return nullptr;
}

}  // namespace lockon::verify
