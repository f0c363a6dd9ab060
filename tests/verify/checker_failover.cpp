// verify/checker_failover.cpp — promotions, the failover excuse and figures.
#include "checker_failover.hpp"

#include <algorithm>

namespace lockon::verify {

namespace {

// "old=6001:new=6002:window_ms=1000" -> the value of `name`, 0 if absent.
int field(const std::string& detail, const std::string& name) {
  const auto at = detail.find(name + "=");
  if (at == std::string::npos) return 0;
  try {
    return std::stoi(detail.substr(at + name.size() + 1));
  } catch (...) {
    return 0;
  }
}

bool on_old_master(const Promotion& p, const CsRecord& r) { return r.server != 0 && r.server == p.old_port; }

}  // namespace

bool Failovers::late(const Promotion& p, int /*port*/, std::int64_t at) const { return at > p.window_end_ns; }

Failovers find_failovers(const History& history) {
  Failovers out;
  const auto window = history.meta.find("failover_window_ms");
  if (window != history.meta.end()) out.window_ns = std::stoll(window->second) * 1'000'000;
  for (const auto& fault : history.faults) {  // sorted by start
    if (fault.type != "unnamed" && fault.type != "named") continue;
    out.has_names = true;
    const int port = fault.target.rfind("master:", 0) == 0 ? std::stoi(fault.target.substr(7)) : 0;
    if (fault.type == "unnamed") {
      out.unnamed.push_back(Unnamed{.port = port, .since = fault.start_ns});
    } else {
      for (Unnamed& u : out.unnamed)
        if (u.port == port && u.until == std::numeric_limits<std::int64_t>::max()) u.until = fault.start_ns;
    }
  }
  std::vector<Promotion>& promotions = out.promotions;
  for (const auto& fault : history.faults) {  // sorted by start
    if (fault.type != "promotion") continue;
    promotions.push_back(Promotion{.record = &fault, .old_port = field(fault.detail, "old"),
                                   .new_port = field(fault.detail, "new"), .at_ns = fault.start_ns,
                                   .window_end_ns = fault.end_ns});
  }
  // The ROLE poll may see the old master's promotion back up to
  // kPromotionSeenLate after it began granting again (CI-like load, seed 2:
  // 141 grants up to 120 ms before the record, all counted late).
  for (std::size_t i = 0; i < promotions.size(); ++i)
    for (std::size_t j = i + 1; j < promotions.size(); ++j)
      if (promotions[j].new_port == promotions[i].old_port) {
        promotions[i].old_back_ns = promotions[j].at_ns - kPromotionSeenLate;
        break;
      }
  return out;
}

namespace {

// failover_excuse with a granted on port `a_port` and b on `b_port` (0:
// unknown; -1: the promotion's old master).
std::optional<FailoverExcuse> excuse_on(const Failovers& failovers, const CsRecord& a, int a_port,
                                        const CsRecord& b, int b_port) {
  // The latest promotion before b says which master was the old one (after
  // failovers undone, two servers take turns being "old").
  for (auto it = failovers.promotions.rbegin(); it != failovers.promotions.rend(); ++it) {
    const Promotion& p = *it;
    if (p.at_ns - kPromotionSeenLate > b.acquired_ns) continue;
    const int ap = a_port < 0 ? p.old_port : a_port, bp = b_port < 0 ? p.old_port : b_port;
    const bool a_old = ap != 0 && ap == p.old_port, b_old = bp != 0 && bp == p.old_port;
    if (a_old && b_old) {
      // Both granted by the old master, a before the promotion and b after
      // it: a's client switched and renews a's (replicated) key on the new
      // master, the old master's copy lapsed and it granted b, the stale one.
      if (a.acquired_ns >= p.at_ns || b.acquired_ns < p.at_ns - kPromotionSeenLate) continue;
      if (failovers.late(p, p.old_port, b.acquired_ns) || b.acquired_ns > p.old_back_ns) continue;
      return FailoverExcuse{.fault = p.record, .stale = &b};
    }
    if (ap != 0 && bp != 0 && ap == bp) continue;
    // The stale one is on the old master; unknown ports: the earlier one.
    const CsRecord& stale = b_old ? b : a;
    const CsRecord& fresh = b_old ? a : b;
    const int stale_port = b_old ? bp : ap;
    if (stale_port != 0 && stale_port != p.old_port) continue;
    if (failovers.late(p, p.old_port, stale.acquired_ns) || stale.acquired_ns > p.old_back_ns) continue;
    if (fresh.acquired_ns < p.at_ns - kPromotionSeenLate) continue;
    // The stale lease was granted before the promotion (its key not yet
    // replicated, or renewed on the old master only) or in the window.
    if (stale.release_ns < p.at_ns - kPromotionSeenLate) continue;
    return FailoverExcuse{.fault = p.record, .stale = &stale};
  }
  return std::nullopt;
}

// The ports `r` may have been granted on: server, and server_before when
// the client switched masters during the acquisition; -1 (the old master)
// when the master did not answer just before (seed 12: a command that
// waited on the stopped old master, granted there as it resumed).
std::vector<int> ports_of(const CsRecord& r) {
  std::vector<int> ports{r.server};
  if (r.server_before != 0 && r.server_before != r.server) ports.push_back(r.server_before);
  return ports;
}

}  // namespace

std::optional<FailoverExcuse> failover_excuse(const Failovers& failovers, const CsRecord& a, const CsRecord& b) {
  for (const int ap : ports_of(a))
    for (const int bp : ports_of(b))
      if (auto excuse = excuse_on(failovers, a, ap, b, bp)) return excuse;
  return std::nullopt;
}

bool granted_in_a_window(const Failovers& failovers, const CsRecord& r) {
  for (const Promotion& p : failovers.promotions)
    for (const int port : ports_of(r))
      if (port != 0 && (port == p.old_port || port < 0) && r.acquired_ns >= p.at_ns - kPromotionSeenLate &&
          !failovers.late(p, p.old_port, r.acquired_ns))
        return true;
  return false;
}

std::vector<FailoverFigure> failover_figures(const History& history, const Failovers& failovers,
                                             std::vector<const CsRecord*>& granted_after_window) {
  std::vector<FailoverFigure> figures;
  for (const Promotion& p : failovers.promotions) {
    FailoverFigure f{.old_port = p.old_port, .new_port = p.new_port, .at_ns = p.at_ns};
    for (const auto& fault : history.faults)  // the injected fault that led to it
      if (fault.start_ns <= p.at_ns && fault.type != "promotion" && fault.type != "demotion" &&
          fault.type != "named" && fault.type != "unnamed" && fault.type != "settle_timeout")
        f.cause = fault.type + ' ' + fault.target;
    for (const auto& fault : history.faults)
      if (fault.type == "demotion" && fault.target == "master:" + std::to_string(p.old_port) &&
          fault.start_ns >= p.at_ns && fault.start_ns < p.old_back_ns) {
        f.demoted_ns = fault.start_ns - p.at_ns;
        break;
      }
    const std::int64_t next = std::min(p.old_back_ns, std::numeric_limits<std::int64_t>::max());
    for (const auto& r : history.sections) {
      if (!r.acquired() || r.acquired_ns < p.at_ns) continue;
      if (r.server == p.new_port && (f.first_on_new_ns < 0 || r.acquired_ns - p.at_ns < f.first_on_new_ns))
        f.first_on_new_ns = r.acquired_ns - p.at_ns;
      if (!on_old_master(p, r) || r.acquired_ns >= next) continue;
      ++f.on_old_after;
      f.last_on_old_ns = std::max(f.last_on_old_ns, r.acquired_ns - p.at_ns);
      f.last_end_on_old_ns = std::max(f.last_end_on_old_ns, r.release_ns - p.at_ns);
      if (failovers.late(p, p.old_port, r.acquired_ns)) {
        ++f.on_old_after_window;
        granted_after_window.push_back(&r);
      }
    }
    figures.push_back(std::move(f));
  }
  return figures;
}

}  // namespace lockon::verify
