// verify/checker.cpp — loading a run's history and the checks themselves.
#include "checker.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <queue>
#include <set>
#include <sstream>

#include "checker_failover.hpp"
#include "fault_kinds.hpp"

namespace lockon::verify {

namespace {

// A call may outlive its deadline by one socket timeout (1 s in the workers)
// plus scheduling noise on a busy 2-core machine.
constexpr std::int64_t kDeadlineTolerance = 1500 * kMs;
// After a fault, every key must see a new section within one TTL plus this.
constexpr std::int64_t kProgressSlack = 1500 * kMs;
// A call that starts this long after the last fault ended must not fail:
// the servers are back, so stale pooled connections, desynchronised replies
// or a lost lease then are bugs, not the fault's expected effect.
constexpr std::int64_t kSettle = 250 * kMs;

// Outcomes that are not failures: contention, or the policy giving up.
bool is_contention(const std::string& error) {
  return error == "-" || error == "busy" || error == "AcquireTimeout" || error == "RetriesExhausted";
}

std::string describe(const CsRecord& r) {
  std::ostringstream out;
  out << r.worker << "/t" << r.thread << "#" << r.seq << ' ' << r.mechanism << " fence=" << r.fence
      << " write=" << r.write << " lost=" << r.lost << " rel_err=" << r.release_error;
  if (r.server != 0) out << " on=" << r.server;
  return out.str();
}

bool is_single_server(const CsRecord& r) { return r.mechanism != "redlock"; }

class Checker {
 public:
  Checker(const History& history, Findings& findings)
      : h_(history), f_(findings), ttl_(history.ttl_ns()), failovers_(find_failovers(history)) {}

  void run() {
    std::map<std::string, std::vector<const CsRecord*>> by_key;
    std::map<std::string, std::vector<const CsRecord*>> asked_by_key;  // every attempt, acquired or not
    for (const auto& r : h_.sections) {
      ++f_.attempts;
      if (r.acquire_error != "-") ++f_.errors[r.mechanism + " acquire " + r.acquire_error];
      if (r.release_error != "-") ++f_.errors[r.mechanism + " release " + r.release_error];
      if (r.write == 'R') ++f_.rejected_accesses;
      if (r.write == 'E') ++f_.resource_errors;
      check_deadline(r);
      check_late_error(r);
      asked_by_key[r.key].push_back(&r);
      if (!r.acquired()) continue;
      ++f_.sections;
      by_key[r.key].push_back(&r);
    }
    for (auto& [key, records] : by_key) {
      std::sort(records.begin(), records.end(),
                [](const CsRecord* a, const CsRecord* b) { return a->acquired_ns < b->acquired_ns; });
      check_overlaps(records);
      if (!is_unfenced(*records.front())) check_fence_order(records);
      check_progress(key, records, asked_by_key[key]);
    }
    check_resource();
    check_old_master_grants();
    for (const auto& entry : h_.keys_without_ttl) add("key_without_ttl", 0, entry);
    for (const auto& worker : h_.hung_workers) add("hung_worker", 0, worker + " did not finish");
  }

 private:
  // The latest fault that started at or before `at` (the cause to look at).
  const FaultRecord* preceding(std::int64_t at) const {
    const FaultRecord* best = nullptr;
    for (const auto& fault : h_.faults)
      if (fault.start_ns <= at) best = &fault;
    return best;
  }

  // When a violation compares with an earlier record (fence order), a fault
  // between the two is the cause, not whatever came last. Preferred: a
  // restart that lost data (resets counters), then a long pause (a lease
  // lapsed under its holder or a waiter), then any fault that can lose lock
  // state; the latest of the best kind, else the first fault in between.
  const FaultRecord* first_between(std::int64_t since, std::int64_t at, bool redlock) const {
    const FaultRecord* first = nullptr;
    const FaultRecord* best = nullptr;
    int best_rank = 0;
    for (const auto& fault : h_.faults) {
      if (fault.start_ns < since || fault.start_ns > at) continue;
      // Faults of the other mechanism's servers do not count.
      if (fault.target.rfind(redlock ? "lock" : "node", 0) == 0) continue;
      if (first == nullptr) first = &fault;
      const FaultKind* kind = find_fault_kind(fault.type);
      const int rank = fault.type == "restart_empty" || fault.type == "node_down" ? 3
                       : fault.type == "pause_long"                                 ? 2
                       : (kind != nullptr && kind->may_break_exclusion) || fault.type.rfind("restart", 0) == 0 ? 1
                                                                                                               : 0;
      if (rank > 0 && rank >= best_rank) {
        best = &fault;
        best_rank = rank;
      }
    }
    return best != nullptr ? best : first;
  }

  // `since`: attribute to the first fault in [since, at]; `cause_at`: to the
  // fault preceding that instant instead of `at` (e.g. where a streak began).
  void add(const std::string& kind, std::int64_t at, std::string what, std::int64_t since = 0,
           std::int64_t cause_at = 0, bool redlock = false) {
    Violation v{.kind = kind, .at_ns = at, .what = std::move(what)};
    const FaultRecord* fault = since > 0 ? first_between(since, at, redlock) : nullptr;
    if (fault == nullptr && at > 0) fault = preceding(cause_at > 0 ? cause_at : at);
    if (fault != nullptr) {
      std::ostringstream cause;
      cause << fault->type << ' ' << fault->target << ' ' << fault->detail << " (started "
            << (at - fault->start_ns) / kMs << " ms before, ended " << (at - fault->end_ns) / kMs << " ms before)";
      v.cause = cause.str();
      v.cause_type = fault->type;
    } else {
      v.cause = at > 0 ? "no fault before it" : "end of run";
      v.cause_type = at > 0 ? "none" : "end";
    }
    f_.violations.push_back(std::move(v));
  }

  // How much of its lease a holder that acquired `held` ns ago surely has
  // left: renewed every TTL/3, a lease has as little as 2/3 of a TTL left
  // when the server stops answering (the next renewal then cannot run), and
  // one taken t < TTL/3 ago has TTL - t. 50 ms: the lease starts when the
  // acquisition is sent, before it returns.
  std::int64_t lease_surely_left(std::int64_t held) const {
    return ttl_ - std::clamp<std::int64_t>(held, 0, ttl_ / 3) - 50 * kMs;
  }

  // A documented cause of lost exclusion covering holder `a` overtaken by `b`:
  // a fault that may break exclusion, between a's lease start (minus one
  // TTL) and b's acquisition, applying to a's mechanism and worker; or a
  // Sentinel promotion (checker_failover.hpp), which may make either stale.
  struct Excuse {
    const FaultRecord* fault = nullptr;
    const CsRecord* stale = nullptr;  // the holder that must see its loss
    // A failover: the resource refusing the stale holder's fence also
    // counts as seeing the loss (fault_kinds.hpp, promotion).
    bool refusal_suffices = false;
  };
  std::optional<Excuse> excuse(const CsRecord& a, const CsRecord& b) const {
    for (const auto& fault : h_.faults) {
      const FaultKind* kind = find_fault_kind(fault.type);
      if (kind == nullptr || !kind->may_break_exclusion) continue;
      if (fault.end_ns < a.acquired_ns - ttl_ || fault.start_ns > b.acquired_ns) continue;
      // Shorter outages than a TTL can lapse a lease held a while (the
      // workload's long holds).
      const bool long_enough = fault.end_ns - fault.start_ns > lease_surely_left(fault.start_ns - a.acquired_ns);
      // A master's stall lapses leases on that master only (seed 21: a holder
      // granted on the new master was taken for the stale one of an overlap
      // with a grant of the stalled old master as it resumed).
      const bool on_stalled = a.server == 0 || fault.target == "master:" + std::to_string(a.server);
      const bool stops_server = (fault.type == "stall_lock" && fault.target == "lock") ||
                                (fault.type == "partition" && fault.target == "lock") ||
                                (fault.type == "master_stall_long" && on_stalled);
      if ((fault.type == "pause_long" && fault.target == a.worker) ||
          (stops_server && long_enough && is_single_server(a)) ||
          (fault.type == "restart_empty" && is_single_server(a)))
        return Excuse{.fault = &fault, .stale = &a};
    }
    if (const auto failover = failover_excuse(failovers_, a, b))
      return Excuse{.fault = failover->fault, .stale = failover->stale, .refusal_suffices = true};
    return std::nullopt;
  }

  // Each section b against those still holding its key when it acquired:
  // one holder at a time, except read shares among themselves and up to
  // kSemaphorePermits semaphore holders (`room` others beside b). Beyond
  // that, some of those holders must be stale: each not excused by a fault
  // is an overlap; and the excused ones that never saw their loss (lost()
  // or a release error) must still fit in the room with the unexcused ones
  // (a semaphore: of two excused holders, one may be legitimate).
  void check_overlaps(const std::vector<const CsRecord*>& records) {
    std::vector<const CsRecord*> active;
    for (const CsRecord* b : records) {
      std::erase_if(active, [&](const CsRecord* a) { return a->release_ns <= b->acquired_ns; });
      std::vector<const CsRecord*> others;
      for (const CsRecord* a : active) {
        if (a->worker == b->worker && a->thread == b->thread) continue;
        if (a->mechanism == "rw_read" && b->mechanism == "rw_read") continue;
        others.push_back(a);
      }
      const std::size_t room = b->mechanism == "sem" ? kSemaphorePermits - 1 : 0;
      if (others.size() > room) check_crowd(*b, others, room);
      active.push_back(b);
    }
  }

  void check_crowd(const CsRecord& b, const std::vector<const CsRecord*>& others, std::size_t room) {
    const auto what = [&](const CsRecord& a) {
      return "key " + b.key + ": [" + describe(a) + "] still held when [" + describe(b) + "] acquired; overlap " +
             std::to_string((std::min(a.release_ns, b.release_ns) - b.acquired_ns) / 1000) + " us";
    };
    std::vector<const CsRecord*> unexcused;
    // Excused but the stale holder never saw the loss: (stale, a).
    std::vector<std::pair<const CsRecord*, const CsRecord*>> silent;
    for (const CsRecord* a : others) {
      if (const auto allowed = excuse(*a, b)) {
        ++f_.allowed_overlaps;
        ++f_.allowed_by_fault[allowed->fault->type];
        const CsRecord* stale = allowed->stale;
        const bool refused = allowed->refusal_suffices && stale->write == 'R';
        if (!stale->lost && stale->release_error == "-" && !refused) silent.emplace_back(stale, a);
      } else {
        unexcused.push_back(a);
      }
    }
    if (unexcused.size() > room) {
      for (const CsRecord* a : unexcused) add("overlap", b.acquired_ns, what(*a));
      return;
    }
    // Reported once per stale section, not once per section it overlapped.
    if (unexcused.size() + silent.size() > room)
      for (const auto& [stale, a] : silent)
        if (silent_.insert(stale).second)
          add("silent_loss", b.acquired_ns, what(*a) + (stale == &b ? " (the later one is the stale holder)" : ""));
  }

  // Sections that did not overlap must take strictly increasing fences in
  // the order they held the key.
  void check_fence_order(const std::vector<const CsRecord*>& records) {
    auto later_release = [](const CsRecord* x, const CsRecord* y) { return x->release_ns > y->release_ns; };
    std::priority_queue<const CsRecord*, std::vector<const CsRecord*>, decltype(later_release)> pending(
        later_release);
    const CsRecord* highest = nullptr;
    for (const CsRecord* b : records) {
      while (!pending.empty() && pending.top()->release_ns < b->acquired_ns) {
        if (highest == nullptr || pending.top()->fence > highest->fence) highest = pending.top();
        pending.pop();
      }
      // A holder granted by an old master in a failover's window is stale:
      // its fence may repeat the new master's, the resource refusing it.
      const bool stale_in_window = b->write != 'A' && granted_in_a_window(failovers_, *b);
      if (!stale_in_window && (b->fence == 0 || (highest != nullptr && b->fence <= highest->fence))) {
        add("fence_order", b->acquired_ns,
            "key " + b->key + ": [" + describe(*b) + "] after [" + (highest ? describe(*highest) : "none") + "]",
            highest ? highest->acquired_ns : 0, 0, !is_single_server(*b));
      }
      pending.push(b);
    }
  }

  // The faults that started inside [from, to), named so that a gap that
  // spans the next fault (they follow each other 0.15-0.75 TTL apart) can
  // be told from one the first fault caused alone.
  std::string faults_during(std::int64_t from, std::int64_t to) const {
    std::string named;
    for (const auto& other : h_.faults)
      if (other.start_ns >= from && other.start_ns < to)
        named += (named.empty() ? "; faults started meanwhile: " : ", ") + other.type + ' ' + other.target + " at +" +
                 std::to_string((other.start_ns - from) / kMs) + " ms for " +
                 std::to_string((other.end_ns - other.start_ns) / kMs) + " ms";
    return named.empty() ? "; no other fault started meanwhile" : named;
  }

  // Until when section `r` held its key legitimately: to its release,
  // unless its worker was killed, or paused longer than a renewed lease
  // surely lasts, while it held: then to one TTL after that stop at most.
  std::int64_t held_until(const CsRecord& r) const {
    std::int64_t until = r.release_ns;
    for (const auto& fault : h_.faults) {
      if (fault.target != r.worker || fault.start_ns > r.release_ns || fault.end_ns < r.acquired_ns) continue;
      const bool kill = fault.type == "kill_worker";
      const bool long_pause =
          fault.type.rfind("pause", 0) == 0 && fault.end_ns - fault.start_ns > lease_surely_left(ttl_ / 3);
      if (kill || long_pause) until = std::min(until, std::max(fault.start_ns, r.acquired_ns) + ttl_);
    }
    return until;
  }

  // When the sections holding the key at `at` let go of it legitimately
  // (held_until): a section holding the key then (a long hold, 2.5 x ttl)
  // is not the lock's delay. `at` itself when none held it.
  // Also long holds announced as they began whose record never came (the
  // worker was killed while holding).
  std::int64_t running_holds_end(const std::string& key, const std::vector<const CsRecord*>& records,
                                 std::int64_t at) const {
    std::int64_t end = at;
    for (const CsRecord* r : records) {
      if (r->acquired_ns >= at) break;
      if (r->release_ns > end) end = std::max(end, held_until(*r));
    }
    for (const HoldRecord& hold : h_.long_holds) {
      if (hold.key != key || hold.acquired_ns >= at || hold.planned_end_ns <= end) continue;
      const CsRecord announced{.worker = hold.worker, .key = hold.key, .acquired_ns = hold.acquired_ns,
                               .release_ns = hold.planned_end_ns};
      end = std::max(end, held_until(announced));
    }
    return end;
  }

  // When someone first wanted the key at or after `at`: the earliest start
  // (or `at`, for one already waiting then) of an attempt still waiting at
  // `at` or begun later. No attempt at all: nobody asked (every thread busy
  // elsewhere, e.g. behind long holds), which is no delay of the lock's.
  // Attempts that failed with an error (the server unreachable: a later
  // fault) are no demand the lock kept waiting: their thread moved on to
  // another key (CI, seed 11: a ConnectError during a restart, then nobody
  // asked for 3.5 s, counted as a 3.8 s gap). Errors after the faults are
  // late_error's business.
  static std::int64_t first_asked(const std::vector<const CsRecord*>& asked, std::int64_t at) {
    std::int64_t first = std::numeric_limits<std::int64_t>::max();
    for (const CsRecord* r : asked)
      if (r->acquired_ns >= at && is_contention(r->acquire_error)) first = std::min(first, std::max(r->start_ns, at));
    return first;
  }

  // Per key: from the end of each fault (or, later, the end of a running
  // hold spanning it, or the first attempt after it) to the key's next
  // acquisition.
  void check_progress(const std::string& key, const std::vector<const CsRecord*>& records,
                      const std::vector<const CsRecord*>& asked) {
    const bool key_on_single_server = records.empty() || is_single_server(*records.front());
    for (const auto& fault : h_.faults) {
      const auto next = std::lower_bound(records.begin(), records.end(), fault.end_ns,
                                         [](const CsRecord* r, std::int64_t t) { return r->acquired_ns < t; });
      if (next == records.end()) continue;
      // Demand counts once the holds running then ended: attempts that gave
      // up before that waited for those holds, not for the lock (verify
      // seed 29: a 4.7 s "gap" after a 5 s read share, nobody asking).
      const std::int64_t to = (*next)->acquired_ns;
      const std::int64_t from = std::min(first_asked(asked, running_holds_end(key, records, fault.end_ns)), to);
      // Less the time later faults stopped the key's server (verify seed 11:
      // 3.8 s across a 1.5 s stall and a restart, charged to the fault before).
      const std::int64_t stopped = stopped_between(fault, key_on_single_server, from, to);
      const std::int64_t gap = std::max<std::int64_t>(0, to - from - stopped);
      if (gap > f_.longest_gap_ns) {
        f_.longest_gap_ns = gap;
        f_.longest_gap_where = "key " + key + " after " + fault.type + ' ' + fault.target + ' ' + fault.detail;
      }
      // A worker paused (or killed) during the gap may have been handed the
      // key, or held it, for one lease: the documented liveness bound (README,
      // "Liveness after faults": one lease per such process, not per waiter).
      std::int64_t leases = 1;
      for (const auto& other : h_.faults)
        if (other.start_ns >= fault.end_ns && other.start_ns < to &&
            (other.type.rfind("pause", 0) == 0 || other.type == "kill_worker"))
          ++leases;
      if (gap > leases * ttl_ + kProgressSlack)
        add("progress_gap", fault.end_ns,
            "key " + key + ": no section for " + std::to_string(gap / kMs) + " ms after the fault ended" +
                faults_during(fault.end_ns, to));
    }
  }

  // Faults that stop all progress on a key while they last: a stall,
  // restart or partition of the lock server, for a key on it. Not error
  // replies or closed connections (they may not even fire), drops (an
  // instant), latency (slower, not stopped), nor a Redlock node's fault (one
  // node, a minority); worker faults add a lease to the bound instead.
  static bool stops_progress(const FaultRecord& fault, bool key_on_single_server) {
    if (!key_on_single_server) return false;
    // The Sentinel topology's master: stopped, or killed until a promotion.
    if (fault.type == "master_kill" || fault.type.rfind("master_stall", 0) == 0) return true;
    if (fault.target != "lock") return false;
    return fault.type == "stall_lock" || fault.type == "partition" || fault.type.rfind("restart", 0) == 0;
  }

  // How long, within [from, to), faults after `fault` stopped the key's
  // server (overlaps counted once).
  std::int64_t stopped_between(const FaultRecord& fault, bool key_on_single_server, std::int64_t from,
                               std::int64_t to) const {
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (const auto& later : h_.faults) {
      if (&later == &fault || later.start_ns < fault.end_ns || !stops_progress(later, key_on_single_server)) continue;
      const std::int64_t begin = std::max(later.start_ns, from), end = std::min(later.end_ns, to);
      if (begin < end) spans.emplace_back(begin, end);
    }
    std::sort(spans.begin(), spans.end());
    std::int64_t total = 0, covered_to = std::numeric_limits<std::int64_t>::min();
    for (const auto& [begin, end] : spans) {
      const std::int64_t start = std::max(begin, covered_to);
      if (end > start) total += end - start;
      covered_to = std::max(covered_to, end);
    }
    return total;
  }

  void check_deadline(const CsRecord& r) {
    const std::int64_t took = r.acquired_ns - r.start_ns;
    if (took <= r.deadline_ms * kMs + kDeadlineTolerance) return;
    // A worker that was itself paused or killed meanwhile is excused.
    for (const auto& fault : h_.faults)
      if ((fault.type.rfind("pause", 0) == 0) && fault.target == r.worker && fault.start_ns < r.acquired_ns &&
          fault.end_ns > r.start_ns)
        return;
    add("deadline_overrun", r.start_ns,
        describe(r) + " acquire took " + std::to_string(took / kMs) + " ms, deadline " +
            std::to_string(r.deadline_ms) + " ms, result " + r.acquire_error);
  }

  // A worker's failures of one error type less than 5 s apart form one
  // episode, and every late error of an episode is attributed to the fault
  // before its first failure: connections broken by one fault keep failing
  // through later, unrelated ones (while other pooled connections succeed).
  void check_late_error(const CsRecord& r) {
    const std::string& error = is_contention(r.acquire_error) ? r.release_error : r.acquire_error;
    if (is_contention(error)) return;
    auto& [episode_start, last_failure] = episodes_[r.worker + ' ' + error];
    if (episode_start == 0 || r.start_ns - last_failure > 5000 * kMs) episode_start = r.start_ns;
    last_failure = std::max(last_failure, r.start_ns);
    for (const auto& f : h_.faults)  // a fault during the call, or just before it
      if (f.start_ns <= r.end_ns && f.end_ns + kSettle > r.start_ns) return;
    add("late_error", r.start_ns,
        describe(r) + " failed with " + error + " in a call started after every fault ended; its worker has been failing for " +
            std::to_string((r.start_ns - episode_start) / kMs) + " ms",
        0, episode_start);
    f_.violations.back().cause_type += "/" + error;  // the table then says which error each fault left behind
  }

  void check_resource() {
    for (const auto& [key, writes] : h_.accepted_writes) {
      for (std::size_t i = 1; i < writes.size(); ++i) {
        const auto& [fence, holder] = writes[i];
        const auto& [previous_fence, previous_holder] = writes[i - 1];
        if (fence < previous_fence || (fence == previous_fence && holder != previous_holder))
          add("stale_write", 0, "key " + key + ": fence " + std::to_string(fence) + " by " + holder +
                                    " accepted after fence " + std::to_string(previous_fence) + " by " +
                                    previous_holder);
      }
    }
    for (const auto& [key, state] : h_.resource_state) {
      const auto field = [&](const std::string& name) {
        const auto it = state.find(name);
        return it == state.end() ? 0LL : it->second;
      };
      if (field("conflicts") > 0 || field("value") != field("accepted"))
        add("lost_update", 0, "key " + key + ": " + std::to_string(field("accepted")) + " accepted writes, value " +
                                  std::to_string(field("value")) + ", conflicts " +
                                  std::to_string(field("conflicts")));
    }
  }

  // Sections granted by an old master after the failover window.
  void check_old_master_grants() {
    std::vector<const CsRecord*> late;
    f_.failovers = failover_figures(h_, failovers_, late);
    for (const CsRecord* r : late) {
      const Promotion* of = nullptr;
      for (const Promotion& p : failovers_.promotions)
        if (p.old_port == r->server && p.at_ns <= r->acquired_ns) of = &p;
      add("old_master_grant", r->acquired_ns,
          "key " + r->key + ": [" + describe(*r) + "] granted on old master " + std::to_string(r->server) + " " +
              std::to_string((r->acquired_ns - (of ? of->at_ns : 0)) / kMs) + " ms after its replica was promoted",
          0, of ? of->at_ns : 0);
    }
  }

  const History& h_;
  Findings& f_;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> episodes_;  // worker + error type -> episode start, last failure
  std::set<const CsRecord*> silent_;  // stale sections already reported as silent losses
  std::int64_t ttl_;
  Failovers failovers_;
};

}  // namespace

Findings check(const History& history) {
  Findings findings;
  Checker(history, findings).run();
  return findings;
}

std::map<std::string, int> Findings::count(const std::string& kind_prefix) const {
  std::map<std::string, int> counts;
  for (const auto& v : violations)
    if (v.kind.rfind(kind_prefix, 0) == 0) ++counts[v.kind];
  return counts;
}

}  // namespace lockon::verify
