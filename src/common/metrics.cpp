#include "lockon/metrics.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

#include "common/metrics_internal.hpp"

namespace lockon {
namespace {

// Each observation lands in one bucket (one atomic add, not one per bound
// above it: a sub-millisecond wait used to cost twelve); snapshot() sums
// them into the cumulative counts the API and Prometheus show.
class Histogram {
 public:
  void observe(double ms) noexcept {
    const auto bound = std::lower_bound(kMetricsBucketsMs.begin(), kMetricsBucketsMs.end(), ms);
    if (bound != kMetricsBucketsMs.end())
      buckets_[static_cast<std::size_t>(bound - kMetricsBucketsMs.begin())].fetch_add(1, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
    // Microseconds as an integer: atomic adds without a CAS loop on a double.
    sum_us_.fetch_add(static_cast<std::uint64_t>(ms * 1000.0), std::memory_order_relaxed);
  }
  HistogramSnapshot snapshot() const noexcept {
    HistogramSnapshot s;
    std::uint64_t below = 0;
    for (std::size_t i = 0; i < kMetricsBucketsMs.size(); ++i) {
      below += buckets_[i].load(std::memory_order_relaxed);
      s.buckets[i] = below;
    }
    s.count = count_.load(std::memory_order_relaxed);
    s.sum_ms = static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1000.0;
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kMetricsBucketsMs.size()> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_us_{0};
};

// How many calls of one function hold their lock now: a gauge of the
// present, so reset_metrics() keeps it (a call acquired before a reset
// releases after it). Signed, and read clamped at 0: an acquisition whose
// recording failed (out of memory for a new entry) still records its
// release.
using HeldGauge = std::atomic<std::int64_t>;

struct Counters {
  std::atomic<std::uint64_t> acquisitions{0}, busy{0}, timeouts{0}, errors{0}, lease_losses{0}, hand_overs{0},
      renewal_failures{0};
  Histogram wait, hold;
  HeldGauge* held = nullptr;  // the function's gauge in Registry::gauges_, never retired
};

std::uint64_t held_now(const HeldGauge& gauge) noexcept {
  const auto n = gauge.load(std::memory_order_relaxed);
  return n > 0 ? static_cast<std::uint64_t>(n) : 0;
}

// Function name -> counters. A lock_on call records twice (acquire,
// release) under its function's name: each thread remembers the last name
// it recorded and its counters, so the calls of a hot function skip the
// shared lock and the map. reset() starts a new epoch, which every thread's
// memory is checked against, and retires the old counters instead of
// freeing them: a recording racing reset() lands in a retired entry, never
// in freed memory.
class Registry {
 public:
  Counters& at(std::string_view function) {
    struct Last {
      std::uint64_t epoch = 0;
      std::string function;
      Counters* counters = nullptr;
    };
    thread_local Last last;
    const std::uint64_t epoch = epoch_.load(std::memory_order_acquire);
    if (last.counters != nullptr && last.epoch == epoch && last.function == function) return *last.counters;
    Counters& found = find_or_add(function);
    last.counters = nullptr;  // consistent if the assignment below throws
    last.function.assign(function);
    last.epoch = epoch;
    last.counters = &found;
    return found;
  }
  std::vector<FunctionMetrics> snapshot() const {
    const std::shared_lock read(mutex_);
    std::vector<FunctionMetrics> out;
    out.reserve(entries_.size());
    for (const auto& [name, c] : entries_) {
      FunctionMetrics m;
      m.function = name;
      m.acquisitions = c->acquisitions.load(std::memory_order_relaxed);
      m.busy = c->busy.load(std::memory_order_relaxed);
      m.timeouts = c->timeouts.load(std::memory_order_relaxed);
      m.errors = c->errors.load(std::memory_order_relaxed);
      m.lease_losses = c->lease_losses.load(std::memory_order_relaxed);
      m.hand_overs = c->hand_overs.load(std::memory_order_relaxed);
      m.renewal_failures = c->renewal_failures.load(std::memory_order_relaxed);
      m.wait = c->wait.snapshot();
      m.hold = c->hold.snapshot();
      m.held = held_now(*c->held);
      out.push_back(std::move(m));
    }
    // Functions holding now but not recorded since a reset_metrics().
    for (const auto& [name, gauge] : gauges_) {
      if (held_now(*gauge) == 0 || entries_.contains(name)) continue;
      FunctionMetrics m;
      m.function = name;
      m.held = held_now(*gauge);
      out.insert(std::lower_bound(out.begin(), out.end(), name,
                                  [](const FunctionMetrics& a, const std::string& b) { return a.function < b; }),
                 std::move(m));
    }
    return out;  // sorted by name
  }
  void reset() noexcept {
    const std::unique_lock write(mutex_);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    try {
      for (auto& [name, counters] : entries_) retired_.push_back(std::move(counters));
    } catch (...) {
      // Out of memory: the unretired counters leak rather than dangle.
      for (auto& [name, counters] : entries_) static_cast<void>(counters.release());
    }
    entries_.clear();
  }

 private:
  Counters& find_or_add(std::string_view function) {
    {
      const std::shared_lock read(mutex_);
      if (auto it = entries_.find(function); it != entries_.end()) return *it->second;
    }
    const std::unique_lock write(mutex_);
    auto [it, inserted] = entries_.try_emplace(std::string(function));
    if (inserted) {
      try {
        auto gauge = gauges_.try_emplace(it->first).first;
        if (!gauge->second) gauge->second = std::make_unique<HeldGauge>(0);  // new, or left empty by a throw
        it->second = std::make_unique<Counters>();
        it->second->held = gauge->second.get();
      } catch (...) {
        entries_.erase(it);  // never an entry without its gauge
        throw;
      }
    }
    return *it->second;
  }

  mutable std::shared_mutex mutex_;
  // Starts at 1: a thread's empty memory (epoch 0) never matches.
  std::atomic<std::uint64_t> epoch_{1};
  // Counters of earlier epochs; a few per reset_metrics() (tests, tools).
  std::vector<std::unique_ptr<Counters>> retired_;
  std::map<std::string, std::unique_ptr<Counters>, std::less<>> entries_;
  // Function name -> its held gauge; kept by reset() (see HeldGauge).
  std::map<std::string, std::unique_ptr<HeldGauge>, std::less<>> gauges_;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

double to_ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Label values escape backslash, double quote and newline (text format 0.0.4).
std::string label(std::string_view value) {
  std::string out = "{function=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}

std::string number(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

namespace metrics_detail {

void record_acquire(std::string_view function, Outcome outcome, std::chrono::steady_clock::duration waited) noexcept {
  try {
    Counters& c = registry().at(function);
    switch (outcome) {
      case Outcome::acquired:
        c.acquisitions.fetch_add(1, std::memory_order_relaxed);
        c.held->fetch_add(1, std::memory_order_relaxed);
        c.wait.observe(to_ms(waited));
        break;
      case Outcome::busy: c.busy.fetch_add(1, std::memory_order_relaxed); break;
      case Outcome::timeout: c.timeouts.fetch_add(1, std::memory_order_relaxed); break;
      case Outcome::error: c.errors.fetch_add(1, std::memory_order_relaxed); break;
    }
  } catch (...) {
    // Out of memory for a new entry: the observation is dropped, not the call.
  }
}

void record_release(std::string_view function, std::chrono::steady_clock::duration held, bool lost,
                    bool handed_over, std::uint64_t renewal_failures) noexcept {
  try {
    Counters& c = registry().at(function);
    c.held->fetch_sub(1, std::memory_order_relaxed);
    c.hold.observe(to_ms(held));
    if (lost) c.lease_losses.fetch_add(1, std::memory_order_relaxed);
    if (handed_over) c.hand_overs.fetch_add(1, std::memory_order_relaxed);
    if (renewal_failures > 0) c.renewal_failures.fetch_add(renewal_failures, std::memory_order_relaxed);
  } catch (...) {
  }
}

}  // namespace metrics_detail

std::vector<FunctionMetrics> metrics_snapshot() { return registry().snapshot(); }

void reset_metrics() noexcept { registry().reset(); }

std::string prometheus_text() {
  const std::vector<FunctionMetrics> all = metrics_snapshot();
  std::string out;
  const auto counter = [&](const char* name, const char* help, std::uint64_t FunctionMetrics::*field) {
    out += std::string("# HELP ") + name + ' ' + help + "\n# TYPE " + name + " counter\n";
    for (const auto& m : all) out += name + label(m.function) + "} " + std::to_string(m.*field) + '\n';
  };
  counter("lockon_acquisitions_total", "lock_on calls that acquired their lock.", &FunctionMetrics::acquisitions);
  counter("lockon_busy_total", "lock_on calls that found the lock held and gave up (busy / max_retry).",
          &FunctionMetrics::busy);
  counter("lockon_timeouts_total", "lock_on calls whose acquisition timed out.", &FunctionMetrics::timeouts);
  counter("lockon_errors_total", "lock_on acquisitions that failed with an infrastructure error.",
          &FunctionMetrics::errors);
  counter("lockon_lease_losses_total", "lock_on calls whose lease was lost while the function ran.",
          &FunctionMetrics::lease_losses);
  counter("lockon_hand_overs_total", "lock_on acquisitions handed over by a release after queueing.",
          &FunctionMetrics::hand_overs);
  counter("lockon_renewal_failures_total", "Failed lease renewals during lock_on calls (no answer / no majority).",
          &FunctionMetrics::renewal_failures);
  const auto histogram = [&](const char* name, const char* help, HistogramSnapshot FunctionMetrics::*field) {
    out += std::string("# HELP ") + name + ' ' + help + "\n# TYPE " + name + " histogram\n";
    for (const auto& m : all) {
      const HistogramSnapshot& h = m.*field;
      const std::string base = label(m.function);
      for (std::size_t i = 0; i < kMetricsBucketsMs.size(); ++i) {
        out += std::string(name) + "_bucket" + base + ",le=\"" + number(kMetricsBucketsMs[i] / 1000.0) + "\"} " +
               std::to_string(h.buckets[i]) + '\n';
      }
      out += std::string(name) + "_bucket" + base + ",le=\"+Inf\"} " + std::to_string(h.count) + '\n';
      out += std::string(name) + "_sum" + base + "} " + number(h.sum_ms / 1000.0) + '\n';
      out += std::string(name) + "_count" + base + "} " + std::to_string(h.count) + '\n';
    }
  };
  out += "# HELP lockon_held lock_on calls holding their lock now.\n# TYPE lockon_held gauge\n";
  for (const auto& m : all) out += "lockon_held" + label(m.function) + "} " + std::to_string(m.held) + '\n';
  histogram("lockon_wait_seconds", "Time lock_on calls waited to acquire their lock.", &FunctionMetrics::wait);
  histogram("lockon_hold_seconds", "Time lock_on calls held their lock.", &FunctionMetrics::hold);
  return out;
}

}  // namespace lockon
