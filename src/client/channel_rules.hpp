// client/channel_rules.hpp — how long a wake-up channel stays subscribed
// and when a refused one is asked for again: the rules of both subscribers
// (the blocking Subscriber, lock/subscriber*.cpp, and the Asio
// AsyncSubscriber). Decisions only, no I/O.
//
// A channel lingers subscribed for kLinger after its last waiter left: a
// lock_on loop on one key queues again within milliseconds, and would
// otherwise pay an UNSUBSCRIBE and a SUBSCRIBE (and wait for the
// confirmation) on every turn. A channel the server refused (-NOPERM: an
// ACL without channel rights) is asked for again after kDeniedRetry
// (rights may be granted meanwhile); its waiters poll. One whose slot moved
// away (MOVED/ASK/CLUSTERDOWN/TRYAGAIN to an SSUBSCRIBE) after kMovedRetry
// (the slot may come back, or the map was stale).
#pragma once

#include <chrono>
#include <string_view>

namespace lockon::detail::channel_rules {

using Clock = std::chrono::steady_clock;

inline constexpr std::chrono::milliseconds kLinger{1000};
inline constexpr std::chrono::milliseconds kDeniedRetry{30'000};
inline constexpr std::chrono::milliseconds kMovedRetry{100};

/// Whether an error answering a sharded SSUBSCRIBE (its first word) says
/// the channel's slot is not (or no longer) this master's: its waiters
/// follow the slot, and the channel is asked for again after kMovedRetry.
inline bool slot_elsewhere(std::string_view code) noexcept {
  return code == "MOVED" || code == "ASK" || code == "CLUSTERDOWN" || code == "TRYAGAIN";
}

/// When a channel idle (no waiter) since `idle_since` is unsubscribed.
inline Clock::time_point linger_end(Clock::time_point idle_since) noexcept { return idle_since + kLinger; }

/// When a channel refused at `refused_at` may be asked for again.
inline Clock::time_point retry_at(Clock::time_point refused_at, bool moved) noexcept {
  return refused_at + (moved ? kMovedRetry : kDeniedRetry);
}

}  // namespace lockon::detail::channel_rules
