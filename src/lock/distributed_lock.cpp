// The parts of DistributedLock that do not depend on the backend.
#include <limits>

#include "protocol/lease.hpp"
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
  validate_name(name, "lock");
  if (!options.no_expiry) {
    // Redis rejects PX values whose absolute expiry overflows; 2^47 ms is
    // ~4,400 years, well inside every limit.
    constexpr long long kMaxTtlMs = 1LL << 47;
    if (options.ttl.count() <= 0)
      throw ConfigError("lock '" + name + "': ttl must be positive (set no_expiry for a lock without expiry)");
    if (options.ttl.count() > kMaxTtlMs) throw ConfigError("lock '" + name + "': ttl exceeds Redis' limit");
  }
  if (options.token && options.token->empty()) throw ConfigError("lock '" + name + "': custom token must not be empty");
  if (options.wait_poll_interval.count() <= 0)
    throw ConfigError("lock '" + name + "': wait_poll_interval must be positive");
  if (options.handoff_spin.count() < 0) throw ConfigError("lock '" + name + "': handoff_spin must not be negative");
  if (options.replica_acks.replicas < 0)
    throw ConfigError("lock '" + name + "': replica_acks.replicas must not be negative");
  if (options.replica_acks.replicas > 0 && options.replica_acks.timeout.count() <= 0)
    throw ConfigError("lock '" + name + "': replica_acks.timeout must be positive (WAIT 0 blocks forever)");
  if (options.max_hold.count() < 0) throw ConfigError("lock '" + name + "': max_hold must not be negative");
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
