#include "common/fork.hpp"

#include <pthread.h>

#include <atomic>

namespace lockon::detail {
namespace {

std::atomic<std::uint64_t> generation{0};

void in_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

// Registered during static initialisation, so a fork at any later moment is
// counted (a fork before any lockon use needs no handling anyway).
const int registered = pthread_atfork(nullptr, nullptr, &in_child);

}  // namespace

std::uint64_t fork_generation() noexcept {
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace lockon::detail
