// MultiLock's single-script path: several keys of single-instance Locks,
// all in one hash slot (or on one non-cluster server), taken in ONE script
// round trip, all or nothing, without jumping any key's FIFO queue
// (scripts::acquire_all in protocol/lock_scripts.hpp). Each key's Lock then
// adopts its part of the acquisition (Lock::Impl::adopt): from there on
// release, extend, renewal and loss detection are the Lock's own.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lockon/lock.hpp"

namespace lockon::detail {

/// A friend of lockon::Lock (it reaches Lock::Impl); internal.
class OneScriptAcquisition {
 public:
  using Clock = std::chrono::steady_clock;
  using Locks = std::vector<std::unique_ptr<DistributedLock>>;

  enum class Outcome {
    taken,            // every key taken and adopted by its Lock
    held,             // a key is held: nothing was taken
    queued,           // a key is free but has waiters queued: nothing was taken
    deadline_passed,  // no reply before the deadline (handed to the clean-up)
    unavailable,      // not possible now (connection dropped, a lease not provable...): use the ordered path
  };

  /// Whether `locks` (distinct keys, at least two) can take this path:
  /// every one a lockon::Lock on the same Client with the same options as
  /// far as an acquisition goes (ttl, expiry, fencing, token, holder
  /// record), no replica acknowledgements, and on a Redis Cluster every key
  /// in one hash slot. On one server or behind Sentinel every key lives on
  /// the one master, so slots do not matter. No I/O.
  static bool eligible(const Locks& locks);

  /// One attempt (`locks` eligible). Throws like Lock's acquisition
  /// (IoError when the outcome is unknown, after handing it to the
  /// clean-up; ReplyError; nothing is then held).
  static Outcome take(const Locks& locks, Clock::time_point deadline);
};

}  // namespace lockon::detail
