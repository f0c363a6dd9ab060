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
/// Whether this thread holds any lock through lock_on calls (cheap: the
/// common, unnested call skips computing its key twice).
bool this_thread_holds_any() noexcept;

/// A non-reentrant call of `site` found `key` held by this thread: throws
/// HeldByThisThread naming the function and the key, or, for a call that
/// does not throw on busy, returns the empty acquisition (busy).
Acquisition refuse_held_by_this_thread(const CallSite& site, std::string_view key, bool throw_on_busy);

}  // namespace lockon::detail
