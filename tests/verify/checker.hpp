// verify/checker.hpp — reads a run's history and finds violations.
//
// Input: the files `lockon_verify run` leaves in its directory (listed in
// orchestrator.cpp). Every violation is attributed to the fault that preceded
// it (the latest fault that started before it), so a report points at a cause.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "history.hpp"

namespace lockon::verify {

struct History {
  std::map<std::string, std::string> meta;
  std::vector<CsRecord> sections;
  std::vector<HoldRecord> long_holds;  // announced when they began
  std::vector<FaultRecord> faults;  // sorted by start
  std::vector<std::string> keys_without_ttl;  // "<server> <key>"
  std::vector<std::string> hung_workers;
  std::map<std::string, int> injected;
  // Resource: per key, accepted writes in order ("fence holder"), and state.
  std::map<std::string, std::vector<std::pair<std::uint64_t, std::string>>> accepted_writes;
  std::map<std::string, std::map<std::string, long long>> resource_state;
  int malformed_lines = 0;
  std::int64_t ttl_ns() const;
};

History load_history(const std::filesystem::path& dir);

/// One Sentinel failover (a `promotion` record) and what the sections did
/// around it; times in ns after the promotion was seen, -1: none.
struct FailoverFigure {
  int old_port = 0;
  int new_port = 0;
  std::int64_t at_ns = 0;
  std::string cause{};                // the injected fault before it
  long long on_old_after = 0;         // sections granted on the old master after the promotion
  long long on_old_after_window = 0;  // ... after the window
  std::int64_t last_on_old_ns = -1;   // last such grant, after the promotion (-1: none)
  std::int64_t last_end_on_old_ns = -1;  // last release of a section on the old master, after it
  std::int64_t first_on_new_ns = -1;  // first grant on the new master, after it
  std::int64_t demoted_ns = -1;       // the old master said slave, after it (-1: not seen)
};

/// One violation, with where it happened and what preceded it.
struct Violation {
  std::string kind{};    // "overlap", "fence_order", "stale_write", ...
  std::int64_t at_ns = 0;
  std::string what{};    // records involved
  std::string cause{};   // the preceding fault, or "no fault"
  std::string cause_type{};  // its type, for the per-fault table
};

struct Findings {
  long long sections = 0;          // acquired critical sections
  long long attempts = 0;          // all records
  int allowed_overlaps = 0;
  std::map<std::string, int> allowed_by_fault;
  std::vector<Violation> violations;
  std::map<std::string, int> errors;  // "<mechanism> acquire|release <type>" -> count
  long long rejected_accesses = 0;    // records with write == 'R'
  long long resource_errors = 0;      // records with write == 'E' (harness problem)
  std::int64_t longest_gap_ns = 0;    // after a fault ended, per key
  std::string longest_gap_where{};
  std::vector<FailoverFigure> failovers;  // Sentinel topology
  std::map<std::string, int> count(const std::string& kind_prefix = "") const;
};

Findings check(const History& history);
/// Prints the summary table and up to `examples` violations of each kind; returns the process exit code (1 on violations).
int report(const History& history, const Findings& findings, int examples);

}  // namespace lockon::verify
