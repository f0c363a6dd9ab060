// Shared by the two halves of Subscriber (subscriber.cpp: the waiters;
// subscriber_thread.cpp: the connection thread). Internal.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <mutex>

#include "lock/subscriber.hpp"

namespace lockon::detail::subscriber_internal {

inline constexpr int kReconnectDelayMs = 100;
inline constexpr int kIdlePollMs = 1000;

inline void drain_fd(int fd) noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto got = ::read(fd, &value, sizeof value);
}

// Tells a waiter asleep on its condition variable to look again whether it
// may read directly (it became the process's lone waiter).
inline void ask_to_reevaluate(Subscriber::Slot& slot) noexcept {
  {
    std::lock_guard lock(slot.mutex);
    slot.reevaluate = true;
  }
  slot.cv.notify_one();
}

}  // namespace lockon::detail::subscriber_internal
