#include "protocol/lock_options.hpp"

#include "lockon/errors.hpp"
#include "lockon/name.hpp"

namespace lockon::detail {

void validate_lock_options(const std::string& name, const LockOptions& options) {
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
}

}  // namespace lockon::detail
