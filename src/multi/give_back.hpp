// Giving back the keys a MultiLock took when its acquisition fails (a later
// key busy until the deadline, an error, a lease that ran out meanwhile):
// both of MultiLock's paths (the ordered one, the single script's).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "common/grace.hpp"
#include "lockon/lock.hpp"

namespace lockon::detail {

/// How long the give-back may wait for the servers: until the caller's
/// deadline, and past it one kCancelGrace at most. A Cluster answering
/// CLUSTERDOWN while a master fails over (or a frozen master) would
/// otherwise hold the caller for the routing bound. What is not confirmed in
/// time is released by the background clean-up. Without a deadline
/// (lock()): as unlock().
inline std::chrono::steady_clock::time_point give_back_bound(std::chrono::steady_clock::time_point deadline) noexcept {
  if (deadline == std::chrono::steady_clock::time_point::max()) return deadline;
  return std::max(deadline, std::chrono::steady_clock::now() + kCancelGrace);
}

/// Releases locks[count - 1] … locks[0] (the reverse of the taking order)
/// by give_back_bound(deadline). Never throws.
inline void give_back(const std::vector<std::unique_ptr<DistributedLock>>& locks, std::size_t count,
                      std::chrono::steady_clock::time_point deadline) noexcept {
  // unlock_until is DistributedLock's protected part: named through a derived class.
  struct Access : DistributedLock {
    static void unlock_by(DistributedLock& lock, Clock::time_point bound) noexcept {
      (lock.*(&Access::unlock_until))(bound);
    }
  };
  const auto bound = give_back_bound(deadline);
  for (std::size_t i = std::min(count, locks.size()); i-- > 0;) Access::unlock_by(*locks[i], bound);
}

}  // namespace lockon::detail
