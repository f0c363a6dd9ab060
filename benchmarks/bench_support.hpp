// Shared by every benchmark case: where the servers are, and how to declare
// which case is the baseline of which ratio.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockon::bench {

/// URL of the first server (started by main, or --redis-url).
const std::string& server_url();

/// URLs of `n` distinct servers (started on demand by main's registry; with
/// --redis-url only n == 1 is available). Throws std::runtime_error otherwise.
std::vector<std::string> server_urls(std::size_t n);

/// A ratio printed after the run: median items/s (or time) of `subject`
/// divided by that of `baseline`, with the target it must meet.
struct RatioSpec {
  std::string label;
  std::string subject;   // benchmark name prefix (without aggregates suffix)
  std::string baseline;
  std::string metric;    // "items_per_second" (higher is better) or "real_time" (lower is better)
  double target;         // the ratio must be >= target (items/s) or <= target (time)
};

/// Registers a ratio to report (call at static-initialization time).
bool register_ratio(RatioSpec spec);

const std::vector<RatioSpec>& ratios();

}  // namespace lockon::bench
