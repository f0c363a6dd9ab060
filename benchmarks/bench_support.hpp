// Shared by every benchmark case: where the servers are, and how to declare
// which case is the baseline of which ratio.
#pragma once

#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lockon::bench {

/// URL of the first server (started by main, or --redis-url).
const std::string& server_url();

/// URLs of `n` distinct servers (started on demand by main's registry; with
/// --redis-url only n == 1 is available). Throws std::runtime_error otherwise.
std::vector<std::string> server_urls(std::size_t n);

/// URLs of the same `n` servers reached through FaultProxy instances
/// (tests/support/fault_proxy.hpp) that hold each direction's bytes for
/// `one_way` (started once per server and delay).
std::vector<std::string> delayed_server_urls(std::size_t n, std::chrono::microseconds one_way);

/// A check printed after the run: the median `metric` of `subject` divided
/// by that of `baseline` (or the value itself when `baseline` is empty),
/// against the target it must meet.
struct RatioSpec {
  std::string label{};
  std::string subject{};   // benchmark name prefix (without aggregate suffix)
  std::string baseline{};  // empty: compare the subject's value itself
  /// "items_per_second", "real_time" (ns) or any user counter's name.
  std::string metric{};
  double target = 1.0;
  /// true: value must be >= target; false: value must be <= target.
  bool higher_is_better = true;
  /// Optional metric of the baseline when it differs from `metric`.
  std::string baseline_metric{};
  /// Multiplies the baseline's value first (e.g. "p50 <= 4 x cycle time").
  double baseline_scale = 1.0;
  /// Printed for context, without a target (e.g. the same check under a
  /// condition that measures the machine rather than the library).
  bool informational = false;
};

/// One variant of an alternating-blocks measurement: `name` suffixes its
/// counters, `cycle` runs one lock/unlock cycle (throws if it cannot).
struct CycleVariant {
  std::string name;
  std::function<void()> cycle;
  double seconds = 0;  // accumulated over the rounds
};

/// The drift-proof measurement: `rounds` rounds, each running `block` cycles
/// of every variant in turn, so a machine that speeds up or slows down
/// (shared virtual cores here, by 2-3x over an hour) affects all alike; the
/// order rotates by one each round (no variant always follows the same one).
/// Sets counters us_per_cycle_<name> and ratio_<name> = the first variant's
/// time / this variant's (cycles/s relative to the first, the baseline).
void run_alternating_blocks(benchmark::State& state, std::vector<CycleVariant>& variants, int rounds, int block);

/// The raw two-round-trip floor of every uncontended comparison: one hiredis
/// connection doing SET key token NX PX 30000, then the compare-and-delete
/// script by EVALSHA, exactly the commands a lock cycle needs.
class RawFloor {
 public:
  RawFloor(const std::string& url, std::string key);
  void cycle();

 private:
  std::unique_ptr<redisContext, decltype(&redisFree)> context_;
  std::string key_;
  std::string sha_;
};

/// Registers a ratio to report (call at static-initialization time).
bool register_ratio(RatioSpec spec);

const std::vector<RatioSpec>& ratios();

}  // namespace lockon::bench
