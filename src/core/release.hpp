// The release of an exclusive lock, written once for both fronts: the
// release script (K deleted if it holds our token, the next waiter handed K
// and woken) and what its answer means for the lease. A coroutine template
// over the lock's port (core/fast_path.hpp lists the port's other steps);
// this one needs
//   Task<Sent> run_release(std::span<const std::string_view> argv, until)
//   void abandon_token(std::string_view token)  the clean-up releases K if
//                                        it still holds `token` (not the
//                                        lock's current one: the async front
//                                        may start a new acquisition meanwhile)
//   void warn_publish_denied()
//
// Invariants: the lease's loss signal fires unless the release is proven
// (K held our token and was released): a holder is never told its section
// was safe when it may not have been. A release whose outcome is unknown (an
// error, no reply by `until`) is handed to the clean-up, so K never stays
// held by a token nobody holds for its TTL.
#pragma once

#include <array>
#include <exception>
#include <string>
#include <string_view>

#include "core/fast_path.hpp"
#include "lockon/errors.hpp"
#include "protocol/lease.hpp"

namespace lockon::detail::core {

/// How a release ended, when it did not throw.
enum class Released {
  released,     // K held our token and is released (the lease is closed)
  not_owned,    // K had expired or held another token (the loss was declared)
  unconfirmed,  // no reply by `until`: handed to the clean-up (the loss was declared)
};

/// Runs the release of `token` and settles `lease`. An error (the reply
/// lost, a refusal) hands K to the clean-up, declares the loss and is
/// rethrown. `token` must outlive the release (a copy, on the async front).
template <class Port>
auto release(Port& port, std::string_view token, LeaseSignal& lease, Clock::time_point until)
    -> typename Port::template Task<Released> {
  const std::array<std::string_view, 1> args{token};
  Sent sent;
  try {
    sent = co_await port.run_release(args, until);
  } catch (const std::exception& e) {
    // Whether the release ran is unknown, so the lease cannot be proven
    // held to its end. The clean-up releases K if it still holds our token.
    port.abandon_token(token);
    lease.declare_lost(LossReason::unreachable, std::string("the release failed: ") + e.what());
    throw;
  }
  if (sent.ended != Sent::Ended::replied) {
    // `until` passed first (a frozen master, a Cluster answering
    // CLUSTERDOWN): unknown as above, but the caller chose not to wait.
    port.abandon_token(token);
    lease.declare_lost(LossReason::unreachable,
                       "the release was not confirmed in time; a background clean-up releases the key if it is "
                       "still ours");
    co_return Released::unconfirmed;
  }
  const redisReply& reply = *sent.replies.front();
  if (reply.type != REDIS_REPLY_INTEGER || reply.integer < 1) {
    lease.declare_lost(LossReason::taken, "the key expired or is held by another owner");
    co_return Released::not_owned;
  }
  if (reply.integer == 2) port.warn_publish_denied();
  lease.close();
  co_return Released::released;
}

/// The error a front reports for Released::not_owned.
inline LockNotOwned release_not_owned(const std::string& name) {
  return LockNotOwned("cannot release lock '" + name + "': it is no longer owned", name);
}

}  // namespace lockon::detail::core
