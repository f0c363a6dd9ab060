// src/common/metrics_internal.hpp — how lock_on records into the registry
// behind lockon/metrics.hpp.
#pragma once

#include <chrono>
#include <string_view>

namespace lockon::metrics_detail {

enum class Outcome { acquired, busy, timeout, error };

/// One acquisition attempt loop's end; `waited` counts only for acquired.
void record_acquire(std::string_view function, Outcome outcome, std::chrono::steady_clock::duration waited) noexcept;

/// A call that held the lock: how long, and whether the lease was lost.
/// `handed_over`: the acquisition came by hand-over; `renewal_failures`:
/// failed renewals of its lease.
void record_release(std::string_view function, std::chrono::steady_clock::duration held, bool lost,
                    bool handed_over = false, std::uint64_t renewal_failures = 0) noexcept;

}  // namespace lockon::metrics_detail
