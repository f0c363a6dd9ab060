// integration/cluster_outage_support.hpp — what the Cluster outage deadline
// tests of both fronts share (test_cluster_outage_deadlines.cpp,
// test_async_cluster_outage_deadlines.cpp): a tally of timed acquisitions
// against their deadline, and waiting for a frozen master's replica to be
// promoted.
//
// The margin: a timed acquisition may end after its deadline only by what
// follows it on the caller's thread (giving up a queue place: one bounded
// round trip of kCancelGrace, 25 ms) and by scheduling on a loaded machine
// (this 2-core VM runs six redis-servers, the test's threads and other
// builds). 250 ms is ten times that grace, and a quarter of the 1 s socket
// timeout that an unbounded step (a map read from the frozen master, a
// read or connect waiting out the socket timeout) costs: a step that
// ignores the deadline shows up as an overrun, a busy scheduler does not.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cluster_fixture.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {

inline constexpr std::chrono::milliseconds kOutageMargin{250};

/// Timed acquisitions during an outage: how each ended, how long it took,
/// and every one that ended later than its deadline plus kOutageMargin.
class OutageTally {
 public:
  explicit OutageTally(std::chrono::milliseconds wait) : wait_(wait) {}

  /// `on_victim`: a key served by the frozen master (before the failover);
  /// `outcome`: "acquired", "false", or the error's class.
  void record(bool on_victim, long long elapsed_ms, const std::string& outcome, const std::string& detail = {}) {
    const std::lock_guard lock(mutex_);
    ++attempts_;
    (on_victim ? victim_attempts_ : other_attempts_)++;
    if (outcome == "acquired") ++acquired_;
    else if (outcome == "false") ++refused_;
    else ++errors_;
    longest_ms_ = std::max(longest_ms_, elapsed_ms);
    if (elapsed_ms > (wait_ + kOutageMargin).count()) {
      ++overruns_;
      if (examples_.size() < 12)
        examples_.push_back(std::to_string(elapsed_ms) + " ms (" + (on_victim ? "frozen master's key" : "other key") +
                            ", " + outcome + (detail.empty() ? "" : ": " + detail.substr(0, 160)) + ")");
    }
  }
  /// A call that threw something that is not a lockon::Error.
  void record_untyped(const std::string& what) {
    const std::lock_guard lock(mutex_);
    ++untyped_;
    if (untyped_examples_.size() < 5) untyped_examples_.push_back(what);
  }

  long long attempts() const { return locked([&] { return attempts_; }); }
  long long victim_attempts() const { return locked([&] { return victim_attempts_; }); }
  long long other_attempts() const { return locked([&] { return other_attempts_; }); }
  long long acquired() const { return locked([&] { return acquired_; }); }
  long long overruns() const { return locked([&] { return overruns_; }); }
  long long untyped() const { return locked([&] { return untyped_; }); }

  std::string summary() const {
    const std::lock_guard lock(mutex_);
    std::ostringstream out;
    out << attempts_ << " attempts (" << victim_attempts_ << " on the frozen master's keys, " << other_attempts_
        << " on others): " << acquired_ << " acquired, " << refused_ << " false, " << errors_ << " typed errors, "
        << untyped_ << " untyped; longest " << longest_ms_ << " ms for a " << wait_.count() << " ms wait; "
        << overruns_ << " over " << (wait_ + kOutageMargin).count() << " ms";
    for (const std::string& example : examples_) out << "\n  overrun: " << example;
    for (const std::string& example : untyped_examples_) out << "\n  untyped: " << example;
    return out.str();
  }

 private:
  template <class F>
  long long locked(F f) const {
    const std::lock_guard lock(mutex_);
    return f();
  }

  std::chrono::milliseconds wait_;
  mutable std::mutex mutex_;
  long long attempts_ = 0;
  long long victim_attempts_ = 0;
  long long other_attempts_ = 0;
  long long acquired_ = 0;
  long long refused_ = 0;
  long long errors_ = 0;
  long long untyped_ = 0;
  long long overruns_ = 0;
  long long longest_ms_ = 0;
  std::vector<std::string> examples_;
  std::vector<std::string> untyped_examples_;
};

/// The master a map read asks first (known masters in "host:port" order):
/// frozen, it is the worst case for a client that waits for that read.
inline RedisServer* first_asked(const std::vector<RedisServer*>& masters) {
  RedisServer* first = nullptr;
  for (RedisServer* master : masters)
    if (first == nullptr || std::to_string(master->port()) < std::to_string(first->port())) first = master;
  return first;
}

/// Polls `replica`'s ROLE (every 50 ms) until it says master: the cluster
/// promoted it. Milliseconds it took, or -1 after `timeout`.
inline long long wait_promoted(const RedisServer& replica, std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  while (ms_since(start) < timeout.count()) {
    try {
      const RawReply role = replica.command({"ROLE"});
      if (!role.elements.empty() && role.elements[0].str == "master") return ms_since(start);
    } catch (...) {
      // busy or reconnecting: ask again
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

}  // namespace lockon::test
