// The loss signal's firing (protocol/lease.hpp): one place for every front,
// the blocking locks' watchdog and the async leases alike.
#include "protocol/lease.hpp"

#include <mutex>
#include <stop_token>
#include <string>
#include <utility>

namespace lockon::detail {

void LeaseSignal::declare_lost(LossReason reason, std::string detail) noexcept {
  if (lost_.exchange(true, std::memory_order_acq_rel)) return;
  // A token made from here on sees lost_ and is born stopped. The stop is
  // requested outside the mutex: it runs the stop callbacks of tokens handed
  // out, which may ask for a token themselves.
  std::stop_source source(std::nostopstate);
  {
    const std::lock_guard guard(stop_mutex_);
    source = stop_;
  }
  if (source.stop_possible()) source.request_stop();
  if (!on_lost_) return;
  try {
    on_lost_(LossEvent{name_, reason, std::move(detail)});
  } catch (...) {
    // A throwing callback on the watchdog thread must not take the process down.
  }
}

}  // namespace lockon::detail
