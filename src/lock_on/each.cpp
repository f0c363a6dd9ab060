// lock_on_each (each selected argument its own entity key, taken as one
// MultiLock) and the per-thread record of held locks behind
// LockOnOptions::reentrant.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lock_on/acquire_internal.hpp"
#include "lockon/key.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/policy.hpp"

namespace lockon::detail {

namespace {

// Reentrancy: the locks this thread holds through lock_on calls, innermost
// last (see LockOnOptions::reentrant).
struct ThreadHold {
  std::uint64_t backend;
  DistributedLock* lock;
};
thread_local std::vector<ThreadHold> thread_holds;

}  // namespace

bool this_thread_holds_any() noexcept { return !thread_holds.empty(); }

DistributedLock* held_by_this_thread(std::uint64_t backend, std::string_view key) {
  for (auto it = thread_holds.rbegin(); it != thread_holds.rend(); ++it) {
    if (it->backend != backend) continue;
    if (const auto* multi = dynamic_cast<const MultiLock*>(it->lock)) {
      for (const std::string& held : multi->keys())
        if (held == key) return it->lock;
    } else if (it->lock->name() == key) {
      return it->lock;
    }
  }
  return nullptr;
}

HeldByThread::HeldByThread(const LockerCore& core, DistributedLock* lock) noexcept {
  try {
    thread_holds.push_back(ThreadHold{core.backend, lock});
    recorded_ = true;
  } catch (...) {
    // Out of memory: a nested reentrant call will wait like a plain one.
  }
}

HeldByThread::~HeldByThread() {
  if (recorded_) thread_holds.pop_back();
}

Acquisition acquire_each(const CallSite& site, const std::vector<std::string>& encoded_args, bool throw_on_busy) {
  const LockerPolicy& policy = site.policy.policy;
  std::vector<std::string> keys;
  keys.reserve(encoded_args.size());
  DistributedLock* outer = nullptr;
  for (const std::string& encoded : encoded_args) {
    std::string key = make_lock_key(policy.key_prefix, std::string_view{}, encoded);
    if (DistributedLock* held = held_by_this_thread(site.core.backend, key)) {
      if (!site.reentrant) return refuse_held_by_this_thread(site, key, throw_on_busy);
      outer = held;
      continue;
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    Acquisition nested;
    nested.reentered = outer;
    return nested;
  }
  std::unique_ptr<DistributedLock> lock =
      std::make_unique<MultiLock>(keys, site.policy.lock_options, site.core.make_lock);
  return attempt_loop(site, std::move(lock), std::string(), throw_on_busy, false);
}

}  // namespace lockon::detail
