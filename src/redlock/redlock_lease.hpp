// The part of a Redlock that its watchdog renewal shares with the lock
// object: the nodes, the names, and the validity deadline of the current
// lease, plus the quorum extension and release used by both.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "redlock/redlock_nodes.hpp"

namespace lockon::detail {

struct RedlockLease {
  using Clock = std::chrono::steady_clock;

  // Immutable after construction.
  std::shared_ptr<const RedlockNodes> nodes;
  std::string name;
  std::string fence_key;
  std::chrono::milliseconds ttl{0};
  double drift_factor = 0.01;

  /// The validity deadline of the current lease (time_point::min() when
  /// none). Readable from any thread.
  Clock::time_point validity_deadline() const noexcept {
    return Clock::time_point(Clock::duration(deadline_.load(std::memory_order_acquire)));
  }
  void set_deadline(Clock::time_point t) noexcept {
    deadline_.store(t.time_since_epoch().count(), std::memory_order_release);
  }

  /// add: every node's PTTL + amount; set: exactly amount; grow (watchdog):
  /// amount if longer than the node's PTTL.
  enum class ExtendMode { add, set, grow };
  enum class ExtendResult {
    extended,    // a majority confirmed in time; the deadline moved
    taken,       // more than N − Q nodes hold another token
    late,        // confirmed only after the validity had ended
    unreachable  // too few answers to decide; the old deadline stands
  };
  struct Extension {
    ExtendResult result;
    std::string detail;  // for messages; never contains the token
  };

  /// The quorum extension shared by extend(), reacquire() and renewals.
  /// Missing keys are re-created with `token`. Serialised with other
  /// extensions of this lease (owner thread vs watchdog). Blocks up to the
  /// per-node timeout. Throws only std::bad_alloc.
  Extension extend(const std::string& token, ExtendMode mode, std::chrono::milliseconds amount);

  /// Deletes `token` on every node (compare-and-delete); tally.ok counts the
  /// deletions. Blocks up to the per-node timeout, and not past `not_after`
  /// save one round trip (RedlockNodes::window). With `until_decided`, stops
  /// waiting once a majority confirmed (or cannot): a frozen minority's keys
  /// then expire by their TTL.
  Tally release(const std::string& token, Clock::time_point not_after = Clock::time_point::max(),
                bool until_decided = false) const;

 private:
  std::mutex update_;
  std::atomic<Clock::rep> deadline_{Clock::time_point::min().time_since_epoch().count()};
};

}  // namespace lockon::detail
