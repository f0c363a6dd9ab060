// integration/test_lock_on_concurrency.cpp — lock_on across processes:
// 2 processes × 8 threads on 4 entity keys. Per-entity counters (a racy
// GET + SET) must come out exact, the critical sections of one entity must
// never overlap in time, and those of different entities must overlap —
// per-argument locking must not serialize unrelated work.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Interval {
  int entity = 0;
  long long start_ns = 0;
  long long end_ns = 0;
};

std::vector<Interval> parse_intervals(const std::string& out) {
  std::vector<Interval> intervals;
  std::istringstream lines(out);
  std::string word;
  while (lines >> word) {
    if (word != "interval") continue;
    Interval interval;
    lines >> interval.entity >> interval.start_ns >> interval.end_ns;
    intervals.push_back(interval);
  }
  return intervals;
}

class LockOnConcurrencyTest : public RedisTest {};

TEST_F(LockOnConcurrencyTest, TwoProcessesEightThreadsFourEntities) {
  constexpr int kProcesses = 2;
  constexpr int kThreads = 8;
  constexpr int kIterations = 20;
  constexpr int kEntities = 4;
  const std::string prefix = key("entities");
  const long long start_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>((Clock::now() + 500ms).time_since_epoch()).count();

  std::vector<Child> workers;
  for (int p = 0; p < kProcesses; ++p) {
    workers.push_back(spawn(worker_argv("lock_on_entities",
                                        {server().url(), prefix, std::to_string(kThreads), std::to_string(kIterations),
                                         std::to_string(kEntities), std::to_string(start_ns)})));
  }
  std::vector<Interval> intervals;
  for (auto& worker : workers) {
    const ProcessResult result = worker.wait(90s);
    ASSERT_TRUE(result.succeeded()) << result.describe();
    const auto mine = parse_intervals(result.out);
    EXPECT_EQ(mine.size(), static_cast<std::size_t>(kThreads * kIterations));
    intervals.insert(intervals.end(), mine.begin(), mine.end());
  }

  // Exact counters: thread t's call i works on (t + i) % kEntities.
  std::map<int, long long> expected;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIterations; ++i) expected[(t + i) % kEntities] += kProcesses;
  for (const auto& [entity, count] : expected) {
    const RawReply value = server().command({"GET", prefix + ":counter:" + std::to_string(entity)});
    EXPECT_EQ(value.str, std::to_string(count)) << "entity " << entity;
  }

  // Same entity: never overlapping. Different entities: overlapping.
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  std::map<int, long long> last_end;
  long long cross_overlaps = 0;
  long long busy_ns = 0;
  long long latest_end = 0;
  for (const Interval& interval : intervals) {
    ASSERT_LE(interval.start_ns, interval.end_ns);
    const auto previous = last_end.find(interval.entity);
    if (previous != last_end.end()) {
      EXPECT_GE(interval.start_ns, previous->second) << "two critical sections of entity " << interval.entity
                                                     << " overlapped";
    }
    for (const auto& [entity, end] : last_end)
      if (entity != interval.entity && end > interval.start_ns) ++cross_overlaps;
    last_end[interval.entity] = interval.end_ns;
    busy_ns += interval.end_ns - interval.start_ns;
    latest_end = std::max(latest_end, interval.end_ns);
  }
  const long long span_ns = latest_end - intervals.front().start_ns;
  const double parallelism = static_cast<double>(busy_ns) / static_cast<double>(span_ns);
  std::cout << intervals.size() << " critical sections in " << span_ns / 1'000'000 << " ms, " << cross_overlaps
            << " cross-entity overlaps, average parallelism " << parallelism << " (4 entities: ideal 4)\n";
  EXPECT_GT(cross_overlaps, 0);
  EXPECT_GT(parallelism, 1.5);  // serialized execution would be ≤ 1
}

}  // namespace
}  // namespace lockon::test
