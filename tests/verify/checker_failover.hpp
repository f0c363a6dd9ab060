// verify/checker_failover.hpp — what the checker requires around a Sentinel
// failover. The reference is the `promotion` record (role_watcher.hpp): the
// moment a replica was seen answering ROLE "master", and the window after it
// during which clients may still be granted locks on the old master (the
// issue-33 target: 1 s). Sections carry the port of the master they ran on.
//   - An overlap of a section on the old master granted before the window
//     ended with a section after the promotion is allowed (async
//     replication); the one on the old master is the stale holder: it must
//     see the loss (or the resource refuse it).
//   - A section granted on the old master after the window is an
//     `old_master_grant` violation, until that port is promoted again.
// The sentinels' view (`unnamed` / `named` records: when no sentinel named a
// port as master any more, and again) is read for the figures, not the
// verdict: the target counts from the promotion, and the nemesis
// injects no fault before the deployment settled (sentinel_nemesis.hpp), so
// sentinels disagree only during a failover's first second (they sent
// clients back to an old master only after a fault mid-failover, which the
// nemesis no longer injects).
// A section's port is asked right after its acquisition (`server`) and just
// before it (`server_before`); when they differ the client switched masters
// meanwhile and either may have granted it: an overlap is excused when some
// choice of the two sections' ports is.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "checker.hpp"

namespace lockon::verify {

struct Promotion {
  const FaultRecord* record = nullptr;
  int old_port = 0;
  int new_port = 0;
  std::int64_t at_ns = 0;          // when ROLE first said master
  std::int64_t window_end_ns = 0;  // the old master may grant until then
  // When the old port was promoted again (its sections are legitimate
  // again), less kPromotionSeenLate: it may grant before the poll sees it.
  std::int64_t old_back_ns = std::numeric_limits<std::int64_t>::max();
};

/// When no sentinel named `port` as master: [since, until).
struct Unnamed {
  int port = 0;
  std::int64_t since = 0;
  std::int64_t until = std::numeric_limits<std::int64_t>::max();
};

/// The promotions in `history`, by time, and the sentinels' view.
struct Failovers {
  std::vector<Promotion> promotions;
  std::vector<Unnamed> unnamed;
  bool has_names = false;  // the history has unnamed/named records
  std::int64_t window_ns = 1'000'000'000;
  /// Whether a section granted on `port` (p's old master) at `at` is late
  /// after `p`: past p's window.
  bool late(const Promotion& p, int port, std::int64_t at) const;
};
Failovers find_failovers(const History& history);

/// The ROLE poll sees a promotion up to this late (a 20 ms period, and a
/// round that waits 150 ms for each stopped server): a section on the new
/// master may be granted that much before the promotion's record.
inline constexpr std::int64_t kPromotionSeenLate = 300'000'000;

struct FailoverExcuse {
  const FaultRecord* fault = nullptr;  // the promotion
  const CsRecord* stale = nullptr;     // the holder on the old master
};

/// Whether a promotion allows `a` (acquired first) and `b` to have held the
/// key together, and which of them was the stale one. Two sections on the
/// same master (both known) are excused only when that is the old master, a
/// granted before the promotion and b after it within the window: a's client
/// switched and renews a's replicated key on the new master while the old
/// master's copy lapses and it grants b, the stale one. A section with no
/// recorded port is taken to be on the old master when it came first.
std::optional<FailoverExcuse> failover_excuse(const Failovers& failovers, const CsRecord& a, const CsRecord& b);

/// True when section `r` is a stale holder of some promotion's window (on
/// the old master, granted between the promotion and the window's end).
bool granted_in_a_window(const Failovers& failovers, const CsRecord& r);

/// Sections granted on an old master after the window (old_master_grant
/// violations, one per section), and the figures of each failover.
std::vector<FailoverFigure> failover_figures(const History& history, const Failovers& failovers,
                                             std::vector<const CsRecord*>& granted_after_window);

}  // namespace lockon::verify
