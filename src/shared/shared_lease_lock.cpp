// lockon::SharedLeaseLock: a SharedHolder behind the DistributedLock
// interface, keeping DistributedLock's state (held, lease) in step so that
// held(), lost(), lost_token() and unlock() work unchanged.
#include "protocol/lease.hpp"
#include "lockon/errors.hpp"
#include "lockon/shared_lease.hpp"
#include "shared/shared_holder.hpp"

namespace lockon {

namespace {

SharedLeaseOptions share_options(const std::string& name, const LockOptions& options) {
  const auto unsupported = [&](const char* what) {
    throw ConfigError("shared lock '" + name + "': " + what + " is not supported for a share or permit");
  };
  if (options.fencing) unsupported("fencing");
  if (options.no_expiry) unsupported("no_expiry");
  if (options.replica_acks.replicas > 0) unsupported("replica_acks");
  if (options.max_hold.count() > 0) unsupported("max_hold");
  if (options.keep_queue_place) unsupported("keep_queue_place");
  return {.ttl = options.ttl,
          .auto_renew = options.auto_renew,
          .wait_poll_interval = options.wait_poll_interval,
          .on_lost = options.on_lost};
}

}  // namespace

SharedLeaseLock::SharedLeaseLock(Client client, std::string name, LockOptions options, char kind, long long permits)
    : DistributedLock(name, options) {
  if (kind == 'p' && permits < 1) throw ConfigError("semaphore '" + name + "': permits must be >= 1");
  const SharedLeaseOptions shared = share_options(name, options);
  holder_ = std::make_unique<detail::SharedHolder>(std::move(client), std::move(name), shared, kind, permits,
                                                   kind == 'p' ? "semaphore" : "read-write lock");
  if (options.token) holder_->set_token(*options.token);
}

std::unique_ptr<SharedLeaseLock> SharedLeaseLock::reader(Client client, std::string name, LockOptions options) {
  return std::unique_ptr<SharedLeaseLock>(new SharedLeaseLock(std::move(client), std::move(name), std::move(options), 's', 0));
}

std::unique_ptr<SharedLeaseLock> SharedLeaseLock::writer(Client client, std::string name, LockOptions options) {
  return std::unique_ptr<SharedLeaseLock>(new SharedLeaseLock(std::move(client), std::move(name), std::move(options), 'x', 0));
}

std::unique_ptr<SharedLeaseLock> SharedLeaseLock::permit(Client client, std::string name, long long permits,
                                                         LockOptions options) {
  return std::unique_ptr<SharedLeaseLock>(
      new SharedLeaseLock(std::move(client), std::move(name), std::move(options), 'p', permits));
}

SharedLeaseLock::~SharedLeaseLock() { unlock(); }

bool SharedLeaseLock::acquire_until(Clock::time_point deadline) {
  if (!holder_->acquire_until(deadline)) return false;
  state().held = true;
  state().fence = 0;
  state().lease = holder_->lease();
  state().generation = detail::fork_generation();
  return true;
}

void SharedLeaseLock::release() {
  state().held = false;
  holder_->release();
}

void SharedLeaseLock::extend(std::chrono::milliseconds, bool) {
  throw LockError("shared lock '" + name() + "': extend is not supported (the watchdog renews a share)", name());
}

void SharedLeaseLock::reacquire() {
  throw LockError("shared lock '" + name() + "': reacquire is not supported (the watchdog renews a share)", name());
}

bool SharedLeaseLock::owned() { return holder_->held() && holder_->probe().first >= 0; }

bool SharedLeaseLock::locked() { return holder_->probe().second > 0; }

std::optional<std::chrono::milliseconds> SharedLeaseLock::remaining_ttl() {
  const long long left = holder_->probe().first;
  if (left < 0) return std::nullopt;
  return std::chrono::milliseconds(left);
}

}  // namespace lockon
