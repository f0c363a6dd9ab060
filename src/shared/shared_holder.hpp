// One holder of a name shared by several: a reader's share or the writer's
// hold of a ReadWriteLock, or one permit of a Semaphore (shared_scripts.hpp
// describes the keys and the scripts).
//
// Acquiring mirrors lockon::Lock: one script attempt when nobody waits (a
// cycle is two round trips, like the raw floor); otherwise the waiter listens
// on the Lock's per-process wake channel *before* queueing, and a release
// hands it the share with no further round trip. A waiter also looks again
// when the earliest holder's lease ends (the script returns that time), so a
// crashed holder delays it by its TTL and a few ms, not by a poll interval.
//
// Thread use: one thread at a time per object.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <stop_token>
#include <string>
#include <utility>

#include "lockon/client.hpp"
#include "lockon/shared_lease.hpp"

namespace lockon::detail {

class LeaseSignal;
struct RenewalEntry;
class ClientImpl;

class SharedHolder {
 public:
  using Clock = std::chrono::steady_clock;

  /// kind: 'x' exclusive, 's' shared, 'p' permit (of `limit`). `what` names
  /// the primitive in messages ("read-write lock", "semaphore").
  /// Validates without I/O (ConfigError).
  SharedHolder(Client client, std::string name, SharedLeaseOptions options, char kind, long long limit,
               const char* what);
  ~SharedHolder();
  SharedHolder(const SharedHolder&) = delete;
  SharedHolder& operator=(const SharedHolder&) = delete;

  /// One attempt when deadline == min(), forever when max(). Throws
  /// LockError if held already, IoError/ReplyError on failures.
  bool acquire_until(Clock::time_point deadline);
  /// Throws LockError if not held, LockNotOwned if the lease had ended;
  /// IoError (outcome unknown) or ReplyError (ServerBusyError: a slot
  /// migration or failover outlasted the socket timeout) if the release
  /// could not be confirmed: it is then retried in the background
  /// (Orphans) and the lease declared lost. Local state is cleared in every
  /// case.
  void release();
  /// release() that records the error instead of throwing.
  void unlock() noexcept;

  bool held() noexcept;
  bool lost() const noexcept;
  std::stop_token lost_token() const noexcept;
  std::exception_ptr last_unlock_error() const noexcept { return last_unlock_error_; }
  const std::string& name() const noexcept { return name_; }
  const SharedLeaseOptions& options() const noexcept { return options_; }
  /// The current (or last) hold's loss signal; null before the first.
  const std::shared_ptr<LeaseSignal>& lease() const noexcept { return lease_; }

  /// One round trip: {ms left of this object's share (-2: none), number of
  /// live holders of the name}.
  std::pair<long long, long long> probe();

  /// A caller-chosen token for every acquisition (SharedLeaseLock, the CLI);
  /// it must identify one holder. Default: 128 random bits per acquisition.
  void set_token(std::string token) { fixed_token_ = std::move(token); }

 private:
  struct Attempt;
  Attempt attempt(const std::string& entry, const char* mode, Clock::time_point until);
  bool wait_for_turn(Clock::time_point deadline);
  bool on_acquired(Clock::time_point lease_from);
  // Removes `entry` now (bounded), else in the background. `late_request`:
  // a request of ours with `entry` may still run after this cancel (its
  // reply was not read), so the background sweeps again in any case.
  void cancel_now(const std::string& entry, bool late_request) noexcept;
  // Hands the removal of `entry` (its queue place and any share of its
  // token) to the background clean-up, retried until it runs.
  void abandon(const std::string& entry) noexcept;
  void stop_renewal() noexcept;
  std::string orphan_entry() const;

  Client client_;
  std::string name_;
  SharedLeaseOptions options_;
  char kind_;
  std::string limit_text_;
  const char* what_;
  std::string ttl_text_;
  std::array<std::string, 3> keys_;  // holders, queue, hand-over record (shared_scripts.hpp)
  std::string wake_prefix_;
  bool sharded_ = false;

  bool held_ = false;
  std::uint64_t generation_ = 0;
  std::string token_;
  std::string fixed_token_;
  std::shared_ptr<LeaseSignal> lease_;
  std::shared_ptr<RenewalEntry> renewal_;
  std::exception_ptr last_unlock_error_;
};

}  // namespace lockon::detail
