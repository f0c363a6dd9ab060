// protocol/lock_options.hpp — the checks of a lock's name and LockOptions
// that every front applies before anything is sent (Lock, Redlock,
// MultiLock through DistributedLock; AsyncLock). No I/O.
#pragma once

#include <string>

#include "lockon/lock.hpp"

namespace lockon::detail {

/// Throws ConfigError naming the lock and the option when `name` or
/// `options` cannot be honoured by any backend (a non-positive ttl, an
/// empty custom token, WAIT 0...). What one front cannot honour on top of
/// that, it refuses itself.
void validate_lock_options(const std::string& name, const LockOptions& options);

}  // namespace lockon::detail
