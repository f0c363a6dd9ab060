// Every switch a test flips and every probe a test reads inside the library,
// in one place: production code reads a switch (each one's default is the
// production behaviour, a hook's is null) and never writes it; only tests
// do. Keeping them here keeps test knobs out of the protocol and port
// headers. Set a hook before the threads it concerns start and reset it
// after they ended.
#pragma once

#include <atomic>
#include <cstdint>

namespace lockon::detail {

struct WaitSlot;  // lock/subscriber.hpp: one waiting acquisition

namespace test_hooks {

/// true (production): a waiter (Lock, shared locks, AsyncLock) whose key a
/// Sentinel failover moves follows it to the new master's subscriber
/// (Lock::Impl::follow_node, SharedHolder::wait_for_turn). false keeps it on
/// the subscriber it queued with, so a test can show that the trust rule
/// for wake-ups alone (protocol/wake_proof.hpp) refuses one that the
/// demoted old master delivers (test_sentinel_replica_wake.cpp).
inline std::atomic<bool> move_waits_after_failover{true};

/// Called by a blocking Lock's waiter right after it sampled its
/// subscriber's connection generation for an attempt and before it sends
/// that attempt (Lock::Impl::attempt_in_line), so a test can have the slot
/// move in between (test_cluster_wake_trust.cpp).
inline void (*after_heard_sampled)() = nullptr;

/// Called by a waiter between its last look at its slot and its bid to read
/// the subscriber's socket directly, so a test can force a dispatch into
/// that window (test_subscriber_direct_reader.cpp).
inline void (*before_direct_read)(WaitSlot&) = nullptr;

/// Called by a waiter that has just become the direct reader, before it
/// polls the socket, so a test can have the thread (whose "who reads"
/// decision is stale) read a message meant for it in that window
/// (test_subscriber_slot_moved.cpp).
inline void (*before_direct_poll)(WaitSlot&) = nullptr;

/// Probe: messages (or pokes) a direct reader found while polling in a
/// spin window instead of sleeping (lock/handoff_spin.hpp), in this
/// process: tests read it to tell that the window was placed where
/// hand-overs arrive.
inline std::atomic<std::uint64_t> seen_while_polling{0};

}  // namespace test_hooks
}  // namespace lockon::detail
