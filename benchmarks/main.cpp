// lockon_benchmarks [--redis-url=URL] [google benchmark flags]
//
// Starts a throwaway redis-server (more on demand, for Redlock) unless
// --redis-url is given, runs the cases, then prints each registered ratio
// of a subject against its baseline measured in this same run (medians of
// the repetitions), with the target it must meet.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_support.hpp"

namespace lockon::bench {
void set_external_url(std::string url);
void stop_servers();
int process_worker_main(int argc, char** argv);  // bench_processes.cpp
}  // namespace lockon::bench

namespace {

// Keeps every run's figures so ratios can be computed after the console
// output, which it forwards unchanged.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.aggregate_name == "median" || (run.aggregate_name.empty() && run.run_type == Run::RT_Iteration)) {
        Figures& f = figures_[run.run_name.str()];
        if (run.aggregate_name == "median" || !f.from_median) {
          f.from_median = run.aggregate_name == "median";
          f.values["real_time"] = run.GetAdjustedRealTime() * to_ns(run.time_unit);
          for (const auto& [name, counter] : run.counters) f.values[name] = counter.value;
        }
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  struct Figures {
    bool from_median = false;
    std::map<std::string, double> values;
    double get(const std::string& metric) const {
      const auto it = values.find(metric);
      return it == values.end() ? 0.0 : it->second;
    }
  };

  const Figures* find(const std::string& prefix) const {
    for (const auto& [name, figures] : figures_)
      if (name == prefix || name.rfind(prefix + "/", 0) == 0) return &figures;
    return nullptr;
  }

 private:
  static double to_ns(benchmark::TimeUnit unit) {
    switch (unit) {
      case benchmark::kNanosecond: return 1;
      case benchmark::kMicrosecond: return 1e3;
      case benchmark::kMillisecond: return 1e6;
      case benchmark::kSecond: return 1e9;
    }
    return 1;
  }
  std::map<std::string, Figures> figures_;
};

}  // namespace

int main(int argc, char** argv) {
  // A worker process of a cross-process benchmark (bench_processes.cpp).
  if (argc > 1 && std::strcmp(argv[1], "--process-worker") == 0)
    return lockon::bench::process_worker_main(argc - 2, argv + 2);
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--redis-url=", 12) == 0) lockon::bench::set_external_url(argv[i] + 12);
    else args.push_back(argv[i]);
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  CollectingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  int failures = 0;
  bool printed_header = false;
  for (const auto& spec : lockon::bench::ratios()) {
    const auto* subject = reporter.find(spec.subject);
    const auto* baseline = spec.baseline.empty() ? nullptr : reporter.find(spec.baseline);
    if (subject == nullptr || (!spec.baseline.empty() && baseline == nullptr)) continue;  // filtered out
    if (!printed_header) {
      std::printf("\nChecks against baselines measured in this run (medians of repetitions):\n");
      printed_header = true;
    }
    const double value = subject->get(spec.metric);
    const std::string& baseline_metric = spec.baseline_metric.empty() ? spec.metric : spec.baseline_metric;
    const double measured = baseline ? value / (baseline->get(baseline_metric) * spec.baseline_scale) : value;
    if (spec.informational) {
      std::printf("  %-64s %10.3f%s (reported, no target)\n", spec.label.c_str(), measured, baseline ? "x" : " ");
      continue;
    }
    const bool ok = spec.higher_is_better ? measured >= spec.target : measured <= spec.target;
    failures += ok ? 0 : 1;
    std::printf("  %-64s %10.3f%s (target %s %.2f%s) %s\n", spec.label.c_str(), measured, baseline ? "x" : " ",
                spec.higher_is_better ? ">=" : "<=", spec.target, baseline ? "x" : "", ok ? "ok" : "MISSED");
  }
  if (printed_header) std::printf("  %d check(s) missed their target\n", failures);
  benchmark::Shutdown();
  lockon::bench::stop_servers();
  return 0;
}
