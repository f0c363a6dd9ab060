// lockon/shared_lease.hpp — the options common to ReadWriteLock and
// Semaphore (primitives with several holders, each on a lease of its own).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "lockon/lock.hpp"

namespace lockon {

/// Options of a ReadWriteLock or a Semaphore. Plain aggregate.
struct SharedLeaseOptions {
  /// Length of each holder's lease (a reader's share, the writer's hold, a
  /// permit). A holder that crashes gives its share back when the lease
  /// ends. Must be > 0 and ≤ 2^40 ms.
  std::chrono::milliseconds ttl{30'000};
  /// The process-wide watchdog renews each held lease every ttl/3. Without
  /// renewal the lease ends at its ttl and the watchdog then declares it
  /// lost (lost_token() stopped, on_lost), without any I/O.
  bool auto_renew = true;
  /// Safety net while waiting: the longest sleep between two attempts when
  /// no notification arrives. A waiter also looks again as soon as the
  /// earliest holder's lease ends. Must be > 0.
  std::chrono::milliseconds wait_poll_interval{250};
  /// Called once when a held lease is lost (renewal found it expired or
  /// could not reach the server in time, the lease ended without renewal, or
  /// the release failed): from the
  /// watchdog thread or the thread releasing. Keep it short; do not call into
  /// the same object.
  std::function<void(const LossEvent&)> on_lost{};
};

namespace detail {

/// A timeout as a steady-clock deadline: min() for "one attempt", max()
/// for a timeout past the clock's range (waits forever instead of wrapping).
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& timeout) {
  using Clock = std::chrono::steady_clock;
  if (timeout <= timeout.zero()) return Clock::time_point::min();
  const auto now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::duration<double, Period>>(Clock::time_point::max() - now);
  if (static_cast<double>(timeout.count()) >= room.count()) return Clock::time_point::max();
  return now + std::chrono::ceil<Clock::duration>(timeout);
}

template <class C, class D>
std::chrono::steady_clock::time_point deadline_at(const std::chrono::time_point<C, D>& deadline) {
  using Clock = std::chrono::steady_clock;
  if constexpr (std::is_same_v<C, Clock>) {
    return deadline <= C::now() ? Clock::time_point::min() : std::chrono::time_point_cast<Clock::duration>(deadline);
  } else {
    return deadline_after(deadline - C::now());
  }
}

class SharedHolder;

}  // namespace detail

/// One share as a DistributedLock: a reader's share or the writer side of a
/// ReadWriteLock, or one permit of a Semaphore, for code written against
/// DistributedLock (RedisLocker, `lockon run --shared / --exclusive /
/// --permits`). Same keys and
/// behaviour as ReadWriteLock / Semaphore on that name.
///
/// Of LockOptions it uses ttl, auto_renew, wait_poll_interval, on_lost and
/// token (a custom token must identify ONE holder: two objects sharing one
/// would count as one share; it does not end in this process's nonce as a
/// random token does, so its grant records it as this process's on the
/// server: paused holding it, the process costs one lease, not one per
/// queued thread); the constructor throws ConfigError for what a
/// share does not support: fencing, no_expiry, replica_acks, max_hold,
/// keep_queue_place. extend() and reacquire() throw LockError (the watchdog
/// renews). fence() is always 0. Thread use: as Lock.
class SharedLeaseLock final : public DistributedLock {
 public:
  /// A reader's share of the ReadWriteLock `name`.
  static std::unique_ptr<SharedLeaseLock> reader(Client client, std::string name, LockOptions options = {});
  /// The writer side of the ReadWriteLock `name`: excludes its readers and
  /// other writers (ReadWriteLock::lock()).
  static std::unique_ptr<SharedLeaseLock> writer(Client client, std::string name, LockOptions options = {});
  /// One of `permits` permits of the Semaphore `name` (permits >= 1).
  static std::unique_ptr<SharedLeaseLock> permit(Client client, std::string name, long long permits,
                                                 LockOptions options = {});
  ~SharedLeaseLock() override;

  /// As ReadWriteLock::release(): LockError if not held, LockNotOwned if
  /// the lease had ended; ServerBusyError (a Cluster slot migration or
  /// failover outlasting the socket timeout), IoError (outcome unknown) or
  /// another ReplyError when the release could not be confirmed: it is then
  /// retried in the background and the lease declared lost.
  void release() override;
  void extend(std::chrono::milliseconds additional, bool replace_ttl = false) override;
  void reacquire() override;
  /// Whether this object's share is live on the server (one round trip).
  bool owned() override;
  /// Whether anyone holds a share of the name (one round trip).
  bool locked() override;
  /// This object's share's remaining lease; nullopt when not held.
  std::optional<std::chrono::milliseconds> remaining_ttl() override;

 protected:
  bool acquire_until(Clock::time_point deadline) override;

 private:
  SharedLeaseLock(Client client, std::string name, LockOptions options, char kind, long long permits);
  std::unique_ptr<detail::SharedHolder> holder_;
};

}  // namespace lockon
