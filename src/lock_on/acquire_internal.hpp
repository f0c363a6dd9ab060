// lock_on's acquisition pieces shared by locker.cpp (lock_on) and
// each.cpp (lock_on_each, reentrancy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "lockon/policy.hpp"

namespace lockon::detail {

/// The attempt loop of policy.hpp on `lock`. `reusable`: file the lock as
/// idle when the call gives up (and afterwards, see recycle()).
Acquisition attempt_loop(const CallSite& site, std::unique_ptr<DistributedLock> lock, std::string encoded_args,
                         bool throw_on_busy, bool reusable);

/// The lock this thread holds on `key` through lock_on calls of `backend`
/// (LockerCore::backend), else null. See LockOnOptions::reentrant.
DistributedLock* held_by_this_thread(std::uint64_t backend, std::string_view key);

}  // namespace lockon::detail
