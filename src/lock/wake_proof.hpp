// The blocking waiters' side of the wake-up proof (Lock, lock_wait.cpp;
// ReadWriteLock/Semaphore, shared_holder.cpp): what their subscriber and
// client know, given to the rule in protocol/wake_proof.hpp. Internal.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

#include "client/client_impl.hpp"
#include "lock/subscriber.hpp"
#include "protocol/wake_proof.hpp"

namespace lockon::detail {

/// Tests only (null otherwise): called by a blocking Lock's waiter right
/// after it sampled its subscriber's connection generation for an attempt
/// and before it sends that attempt (Lock::Impl::attempt_in_line), so a test
/// can have the slot move in between (test_cluster_wake_trust.cpp). Set it
/// before the waiting thread starts and reset it after it ended.
inline void (*after_heard_sampled_for_tests)() = nullptr;

inline bool wake_proves_grant(const Subscriber::Watch& watch, std::uint64_t heard, ClientImpl& client,
                              std::string_view name, const std::shared_ptr<Node>& listening_node, bool sharded) {
  std::uint64_t delivered_by = 0;
  {
    auto& slot = watch.slot();
    std::lock_guard lock(slot.mutex);
    delivered_by = slot.handed_generation;
  }
  return wake_proves_grant(delivered_by, heard, sharded, [&] {
    try {
      // Cached (Sentinel may start a resolution in the background, never waits).
      return client.node_for(name, std::chrono::steady_clock::now()) == listening_node;
    } catch (...) {
      return false;
    }
  });
}

}  // namespace lockon::detail
