// lockon/metrics.hpp — counters and histograms of lock_on calls, per function
// name (the name given to lock_on/decorate; never per key, so the number of
// series stays bounded by the code, not by the data).
//
//   for (const auto& f : lockon::metrics_snapshot()) ... f.acquisitions ...
//   std::string body = lockon::prometheus_text();  // serve it on /metrics
//
// Recorded by every RedisLocker in the process, always on (a few atomic
// increments per call; one shared-lock map lookup by function name).
// Thread-safe. No dependency: prometheus_text() writes the text exposition
// format 0.0.4 itself.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lockon {

/// Upper bounds (milliseconds, inclusive) of the histogram buckets; a last,
/// implicit bucket is +Inf.
inline constexpr std::array<double, 12> kMetricsBucketsMs{1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

struct HistogramSnapshot {
  /// Cumulative counts: buckets[i] = observations <= kMetricsBucketsMs[i].
  std::array<std::uint64_t, kMetricsBucketsMs.size()> buckets{};
  std::uint64_t count = 0;  // all observations (the +Inf bucket)
  double sum_ms = 0;
};

struct FunctionMetrics {
  std::string function;           // the lock_on function name
  std::uint64_t acquisitions = 0;  // calls that got the lock
  std::uint64_t busy = 0;          // gave up on a held lock: try_lock_on busy, or max_retry exhausted
  std::uint64_t timeouts = 0;      // gave up because the policy timeout passed (AcquireTimeout)
  std::uint64_t errors = 0;        // acquisition failed with an infrastructure error
  std::uint64_t lease_losses = 0;  // the lease was lost while the function ran (LockLost)
  std::uint64_t hand_overs = 0;    // acquisitions handed over by a release (they had queued)
  std::uint64_t renewal_failures = 0;  // lease renewals that failed (no answer / no majority)
  std::uint64_t held = 0;  // calls holding the lock now (a gauge: reset_metrics() keeps it)
  HistogramSnapshot wait;          // acquisition time of the calls that got the lock
  HistogramSnapshot hold;          // from acquisition to release
};

/// One entry per function name seen so far, sorted by name.
std::vector<FunctionMetrics> metrics_snapshot();

/// Forgets all recorded values (tests; a fresh scrape baseline). The
/// `held` gauge is the present, not a record: it is kept, and a function
/// holding its lock now stays listed.
void reset_metrics() noexcept;

/// metrics_snapshot() in the Prometheus text format: lockon_acquisitions_total,
/// lockon_busy_total, lockon_timeouts_total, lockon_errors_total,
/// lockon_lease_losses_total, lockon_hand_overs_total,
/// lockon_renewal_failures_total (counters), lockon_held (a gauge: calls
/// holding their lock at the scrape) and lockon_wait_seconds,
/// lockon_hold_seconds (histograms), each labelled function="NAME".
std::string prometheus_text();

}  // namespace lockon
