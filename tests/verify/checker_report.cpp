// verify/checker_report.cpp — the summary table and `lockon_verify check`.
#include <cstdio>
#include <iostream>
#include <set>

#include "checker.hpp"
#include "verify.hpp"

namespace lockon::verify {

namespace {

constexpr const char* kKinds[] = {"overlap",          "silent_loss",  "stale_write",     "fence_order",
                                  "lost_update",      "deadline_overrun", "progress_gap", "late_error", "key_without_ttl",
                                  "hung_worker", "old_master_grant"};

void row(const std::string& name, const std::string& value) { std::printf("  %-38s %s\n", name.c_str(), value.c_str()); }

std::string ms(std::int64_t ns) { return ns < 0 ? "-" : std::to_string(ns / 1'000'000) + " ms"; }

// Sentinel topology: per promotion, how long the old master kept granting.
void report_failovers(const Findings& f) {
  long long after_window = 0;
  for (const auto& failover : f.failovers) after_window += failover.on_old_after_window;
  row("failovers (promotions seen)", std::to_string(f.failovers.size()));
  row("sections granted by an old master late", std::to_string(after_window) + " (after the window: old_master_grant)");
  std::printf("  per failover (after the promotion): cause | sections on the old master, after the window | last grant "
              "there | last release there | first grant on the new one | old master demoted\n");
  for (const auto& x : f.failovers)
    std::printf("    %d -> %d  %-28s | %lld, %lld | %s | %s | %s | %s\n", x.old_port, x.new_port, x.cause.c_str(),
                x.on_old_after, x.on_old_after_window, ms(x.last_on_old_ns).c_str(), ms(x.last_end_on_old_ns).c_str(),
                ms(x.first_on_new_ns).c_str(), ms(x.demoted_ns).c_str());
  row("old master grant violations", std::to_string(f.count("old_master_grant")["old_master_grant"]));
}

}  // namespace

int report(const History& h, const Findings& f, int examples) {
  const auto meta = [&](const std::string& key) {
    const auto it = h.meta.find(key);
    return it == h.meta.end() ? std::string("?") : it->second;
  };
  const double seconds = std::max(1.0, std::stod(meta("seconds") == "?" ? "1" : meta("seconds")));
  const auto counts = f.count();
  const auto count_of = [&](const std::string& kind) {
    const auto it = counts.find(kind);
    return it == counts.end() ? 0 : it->second;
  };
  std::printf("\n== lockon verification: seed %s, %s s, ttl %s ms, %s workers x %s threads, %s keys ==\n",
              meta("seed").c_str(), meta("seconds").c_str(), meta("ttl_ms").c_str(), meta("workers").c_str(),
              meta("threads").c_str(), meta("keys").c_str());
  row("critical sections", std::to_string(f.sections) + " (" + std::to_string(static_cast<long long>(
                                                                   static_cast<double>(f.sections) / seconds)) +
                               "/s), attempts " + std::to_string(f.attempts));
  std::string injected;
  int total_faults = 0;
  for (const auto& [type, n] : h.injected) {
    injected += type + "=" + std::to_string(n) + " ";
    total_faults += n;
  }
  row("faults injected", std::to_string(total_faults) + ": " + injected);
  row("overlaps allowed (documented cause)", std::to_string(f.allowed_overlaps));
  for (const auto& [type, n] : f.allowed_by_fault) row("  allowed after " + type, std::to_string(n));
  row("overlaps forbidden", std::to_string(count_of("overlap")));
  row("allowed overlaps, loss not signalled", std::to_string(count_of("silent_loss")));
  row("stale writes accepted", std::to_string(count_of("stale_write")));
  row("fence order violations", std::to_string(count_of("fence_order")));
  row("lost updates (keys)", std::to_string(count_of("lost_update")));
  row("deadline overruns", std::to_string(count_of("deadline_overrun")));
  row("longest per-key progress gap after fault",
      std::to_string(f.longest_gap_ns / 1'000'000) + " ms (" + f.longest_gap_where + ")");
  row("progress gaps > ttl + slack", std::to_string(count_of("progress_gap")));
  row("errors in calls started after faults", std::to_string(count_of("late_error")));
  row("keys without TTL at the end", std::to_string(count_of("key_without_ttl")));
  row("hung workers at the end", std::to_string(count_of("hung_worker")));
  if (!f.failovers.empty()) report_failovers(f);
  row("stale accesses refused by resource", std::to_string(f.rejected_accesses));
  row("resource errors (harness)", std::to_string(f.resource_errors));
  row("malformed log lines (killed workers)", std::to_string(h.malformed_lines));
  std::printf("  errors by type:\n");
  for (const auto& [what, n] : f.errors) std::printf("    %-46s %d\n", what.c_str(), n);

  if (!f.violations.empty()) {
    // Which fault preceded each kind of violation: the table that points at causes.
    std::map<std::string, std::map<std::string, int>> by_cause;
    for (const auto& v : f.violations) ++by_cause[v.kind][v.cause_type];
    std::printf("  violations by preceding fault:\n");
    for (const auto& [kind, causes] : by_cause) {
      std::string text;
      for (const auto& [cause, n] : causes) text += cause + "=" + std::to_string(n) + " ";
      std::printf("    %-20s %s\n", kind.c_str(), text.c_str());
    }
    std::printf("  examples:\n");
    for (const char* kind : kKinds) {
      int shown = 0;
      for (const auto& v : f.violations) {
        if (v.kind != kind || shown++ >= examples) continue;
        std::printf("    [%s] %s\n      cause: %s\n", kind, v.what.c_str(), v.cause.c_str());
      }
    }
  }
  std::printf("RESULT: %s (%zu violations)\n", f.violations.empty() ? "PASS" : "FAIL", f.violations.size());
  std::fflush(stdout);
  return f.violations.empty() ? 0 : 1;
}

int run_check_dir(const std::filesystem::path& dir, int examples) {
  const History history = load_history(dir);
  if (history.meta.empty()) {
    std::cerr << "no meta.txt in " << dir << ": not a lockon_verify run directory\n";
    return 2;
  }
  return report(history, check(history), examples);
}

int run_check(const Args& args) {
  if (!args.has("dir")) {
    std::cerr << "usage: lockon_verify check --dir D [--examples N]\n";
    return 2;
  }
  return run_check_dir(args.get("dir"), static_cast<int>(args.number("examples", 4)));
}

}  // namespace lockon::verify
