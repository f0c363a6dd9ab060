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
