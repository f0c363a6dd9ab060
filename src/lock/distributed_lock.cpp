// The parts of DistributedLock that do not depend on the backend.
#include <limits>

#include "protocol/lease.hpp"
#include "protocol/lock_options.hpp"
#include "lockon/errors.hpp"
#include "lockon/name.hpp"
#include "lockon/lock.hpp"

namespace lockon {

std::string_view to_string(LossReason reason) noexcept {
  switch (reason) {
    case LossReason::taken: return "taken";
    case LossReason::unreachable: return "unreachable";
    case LossReason::max_hold: return "max_hold";
  }
  return "unknown";
}

DistributedLock::DistributedLock(std::string name, LockOptions options) : state_(std::make_shared<State>()) {
  detail::validate_lock_options(name, options);
  state_->name = std::move(name);
  state_->options = std::move(options);
}

DistributedLock::~DistributedLock() = default;

// A wait without a deadline ends with the lock or an exception: never by
// returning without it (a guard would run its section unprotected).
void DistributedLock::lock() {
  if (!acquire_until(Clock::time_point::max()))
    throw LockError("lock '" + state_->name + "': the acquisition ended without the lock", state_->name);
}

bool DistributedLock::try_lock() { return acquire_until(Clock::time_point::min()); }

void DistributedLock::unlock() noexcept { unlock_until(Clock::time_point::max()); }

void DistributedLock::unlock_until(Clock::time_point deadline) noexcept {
  State& s = *state_;
  if (!s.held_here()) return;
  try {
    release_until(deadline);
    s.last_unlock_error = nullptr;
  } catch (const LockNotOwned& e) {
    s.last_unlock_error = std::current_exception();
    if (s.lease) s.lease->declare_lost(LossReason::taken, e.what());
  } catch (...) {
    s.last_unlock_error = std::current_exception();
  }
  s.held = false;
}

bool DistributedLock::held() const noexcept { return state_->held_here(); }
bool DistributedLock::lost() const noexcept { return state_->lease && state_->lease->lost(); }
std::stop_token DistributedLock::lost_token() const noexcept {
  return state_->lease ? state_->lease->token() : std::stop_token{};
}
std::uint64_t DistributedLock::fence() const noexcept { return state_->fence; }
const std::string& DistributedLock::name() const noexcept { return state_->name; }
const LockOptions& DistributedLock::options() const noexcept { return state_->options; }
std::exception_ptr DistributedLock::last_unlock_error() const noexcept { return state_->last_unlock_error; }

}  // namespace lockon
