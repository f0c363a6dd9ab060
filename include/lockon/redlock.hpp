// lockon/redlock.hpp — the multi-master quorum lock ("Redlock").
//
// A `Redlock` holds one lock key on N ≥ 1 *independent* Redis masters (not
// replicas of each other, not one server under several names) and counts as
// acquired only while a majority of them hold its token. It has the surface
// of `lockon::Lock` (TimedLockable through `DistributedLock`, release/extend/
// reacquire/owned/locked/remaining_ttl, watchdog renewal, lease-loss signal,
// fencing) and can be used through `DistributedLock&`.
//
//   std::vector<lockon::Client> nodes{lockon::Client("redis://a:6379"),
//                                     lockon::Client("redis://b:6379"),
//                                     lockon::Client("redis://c:6379")};
//   lockon::Redlock lock(nodes, "orders:42", {.ttl = 10s, .fencing = true});
//   std::unique_lock guard(lock);            // blocks until a majority is won
//   storage.write(data, lock.fence());       // the resource checks the fence
//
// ALGORITHM (the Redis "distlock" page, with the choices made here)
//   * Quorum Q = N/2 + 1 (integer division): 1 of 1, 2 of 3, 3 of 5.
//   * One fresh 128-bit CSPRNG token per *attempt* (or LockOptions::token).
//   * Attempt: `SET key token NX PX ttl` is written to every node before any
//     reply is read (nodes are contacted in parallel, and so are connects:
//     a node that accepts no connection costs the deadline once); the whole
//     fan-out — connects, writes, replies — shares one deadline of
//     `per_node_timeout`, cut to the caller's deadline (plus one round trip
//     of at most 5 ms) when that comes first. With fencing, a Lua script does
//     the SET and also returns the node's fence counter and clock.
//   * The fan-out is decided as soon as Q nodes granted (or more than N − Q
//     cannot): a frozen minority is not waited for (docs/redlock.md,
//     "decided early").
//   * The attempt succeeds only if ≥ Q nodes granted the key *and* the
//     validity is still positive when all replies are in:
//         validity_deadline = start + ttl − (ttl × drift_factor + 2 ms)
//     where start is taken just before the first request is written; so the
//     time spent talking to the nodes is subtracted from the lease.
//   * A failed attempt deletes its token on ALL nodes (also on those that
//     seemed to fail: their SET may have been executed with a lost reply),
//     then waits a random delay in [retry_delay_min, retry_delay_max], never
//     past the caller's deadline, and tries again (not once the delay reached
//     the deadline: no attempt is begun there). Attempts that fail because
//     nodes fail (no majority possible, or validity used up) are retried at
//     most 3 times in a row, then QuorumError is thrown: an outage is
//     reported, not waited out. Waiting is polling: a Redlock has no pub/sub
//     hand-off and no FIFO queue (wait_poll_interval is not used).
//   * Extend/reacquire/renewal use a script that, on each node, pushes the
//     expiry of a key holding our token, and *re-creates* a missing key with
//     our token (a node restarted empty must not silently cost us the
//     majority; redsync's SetNXOnExtend lesson). A key holding another token
//     is never touched. Success needs Q nodes, completion before the current
//     validity deadline, and a positive new validity.
//   * Release deletes the token on all nodes; success needs Q deletions. A
//     release that is not confirmed (too few answers, or the token gone on
//     more than N − Q nodes) is signalled as a loss (lost(), on_lost).
//   * lost() also turns true by itself once the validity deadline of the
//     last acquisition, extension or renewal has passed unrenewed — possibly
//     before on_lost runs (the watchdog calls it when its renewal gives up).
//   * owned()/locked()/remaining_ttl() are answered by a majority.
//   * A custom token (LockOptions::token) is the same on every acquisition,
//     so a request to a frozen node that was not waited for (a release, or
//     a failed attempt's clean-up) can still run there after a LATER
//     acquisition with that token won the node, and delete it there. That
//     acquisition then holds one node fewer than it counted: two holders if
//     it had counted exactly Q. Unlike Lock (whose clean-ups a custom-token
//     acquisition runs first, LockOptions::token), Redlock does not wait for
//     a frozen node's requests: that is what deciding early is for. Prefer
//     the default fresh token per attempt with Redlock.
//
// FENCING (LockOptions::fencing): `fence()` is strictly greater than the fence
// of every earlier acquisition of the same name (by any process) if EITHER
// (a) at least one node that recorded the earlier fence still has its data
// and answers the later acquisition (e.g. the earlier acquisition reached all
// N nodes and fewer than Q of them lost their data since), OR (b) the clock
// (TIME, µs) of some node answering the later acquisition reads more than
// the earlier fence — which holds after any restart or counter expiry as long
// as no node's wall clock is behind the clock that produced the earlier
// fence by more than the time elapsed between the two acquisitions (no clock
// stepped back, node clocks roughly in sync). Each node keeps a counter in a
// companion key (`{name}:fence`, same cluster slot, expires one hour after
// its last write); an acquisition takes the max over answering nodes of
// max(counter + 1, node TIME in µs) and writes it back (a max-update) to
// every node; it succeeds only if ≥ Q nodes that still hold its token
// acknowledge the write-back. Fences are therefore large numbers (µs since
// 1970), not 1, 2, 3. docs/redlock.md has the argument.
//
// SAFETY CAVEATS (read docs/redlock.md): mutual exclusion assumes bounded
// clock *rate* drift between client and servers (drift_factor) and holders
// that finish their work before validity_deadline(). A holder paused past its
// lease (GC, SIGSTOP, swap) keeps acting; only a resource that checks fences
// is safe against that (Kleppmann). A node restarted without persistence
// while holding keys must stay down longer than the largest TTL in use.
//
// Thread use: as for every DistributedLock (one thread at a time per object).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"

namespace lockon {

/// What a Redlock asked one node to do.
enum class NodeOperation {
  probe,    // construction-time PING
  acquire,  // SET NX PX (or the fencing acquire script)
  fence,    // fence write-back after a majority was won
  extend,   // extend(), reacquire() and watchdog renewals
  release,  // release(), and the cleanup of a failed attempt
  check,    // owned(), locked(), remaining_ttl()
};

/// How one node answered.
enum class NodeOutcome {
  ok,       // it did what was asked (granted, extended, released, answered)
  refused,  // it answered "no": the key is held by another owner, or gone
  failed,   // no usable answer: connection refused, timeout, error reply...
};

/// "probe", "acquire", "fence", "extend", "release", "check".
std::string_view to_string(NodeOperation operation) noexcept;
/// "ok", "refused", "failed".
std::string_view to_string(NodeOutcome outcome) noexcept;

/// One node's result of one operation, passed to RedlockOptions::on_node_event.
/// Never contains a token or a password.
struct NodeEvent {
  std::string name;          // the lock key
  std::string endpoint;      // "host:port" of the node
  NodeOperation operation;
  NodeOutcome outcome;
  std::string detail;        // e.g. "acquired", "held by another owner", the error text
  std::chrono::microseconds elapsed{0};  // from the start of the fan-out to this node's answer

  bool ok() const noexcept { return outcome == NodeOutcome::ok; }
};

/// Redlock-specific options (LockOptions applies as for Lock). Plain aggregate
/// with documented defaults.
struct RedlockOptions {
  /// Clock-drift allowance, as a fraction of the TTL, subtracted from every
  /// validity together with a fixed 2 ms. Must be in [0, 0.5).
  double drift_factor = 0.01;
  /// How long one operation waits for the slowest node (the nodes are waited
  /// for in parallel, so this bounds each operation's node phase). 0 means
  /// automatic: clamp(ttl / 100, 25 ms, 200 ms), but at most ttl / 4 — small
  /// relative to the TTL, so a dead or frozen node costs at most 1 % of the
  /// lease per operation, yet long enough that a healthy node on a busy host
  /// is not counted as failed (redsync uses ttl × 0.05; the distlock page
  /// suggests 5–50 ms for a 10 s TTL on a LAN). Must be ≥ 0. It also bounds
  /// connecting: nodes that need a connection are dialled in parallel and
  /// waited for within the same deadline (not the nodes' connect_timeout).
  std::chrono::milliseconds per_node_timeout{0};
  /// Random delay between two attempts while other owners hold the key,
  /// uniformly drawn from [min, max]; never sleeps past the caller's
  /// deadline. Must satisfy 0 ≤ min ≤ max, max > 0.
  std::chrono::milliseconds retry_delay_min{5};
  std::chrono::milliseconds retry_delay_max{200};
  /// PING every node at construction and refuse (QuorumError) when fewer
  /// than a majority answer. Set false where many short-lived Redlocks are
  /// built over nodes already checked (e.g. one per call in RedisLocker):
  /// the constructor then does no I/O, and an unreachable majority surfaces
  /// at the first acquisition instead.
  bool check_nodes = true;
  /// Receives every node's result of every operation (see NodeEvent), on the
  /// thread doing the operation — the caller's, or lockon's watchdog thread
  /// for renewals. Must be thread-safe if several locks share it, short, not
  /// throw (exceptions are swallowed) and must not call into the lock.
  std::function<void(const NodeEvent&)> on_node_event{};
};

/// A lock held on a majority of N independent Redis masters.
class Redlock final : public DistributedLock {
 public:
  /// Validates, then (unless RedlockOptions::check_nodes is false) PINGs
  /// every node in parallel (one fan-out bounded by max(per_node_timeout,
  /// 100 ms) plus connection set-up). Blocks for that. Reports each node's
  /// probe through on_node_event.
  ///
  /// Throws ConfigError (nothing sent) for: no nodes; two nodes with the same
  /// endpoint (one server must not vote twice); no_expiry (the algorithm
  /// needs expiring keys); an invalid RedlockOptions field; or anything Lock
  /// rejects (empty name or one over kMaxNameBytes, ttl out of range, empty
  /// token...), before any node is contacted.
  /// Throws QuorumError when fewer than a majority of nodes answer; its
  /// message names the reachable and the unreachable nodes (endpoints and
  /// error texts, never credentials). With a majority, constructs and the
  /// missing nodes are only reported through the hook (they are retried on
  /// every operation).
  Redlock(std::vector<Client> nodes, std::string name, LockOptions options = {},
          RedlockOptions redlock = {});
  /// Convenience: one Client per URL (see ConnectionOptions::from_url); a bad
  /// URL throws ConfigError. Otherwise as above.
  Redlock(const std::vector<std::string>& urls, std::string name, LockOptions options = {},
          RedlockOptions redlock = {});
  /// Releases if held (as unlock(): never throws) and stops renewal.
  ~Redlock() override;

  /// Deletes the token on every node (in parallel). Returns once a majority
  /// confirmed (a frozen minority is not waited for: its keys expire by
  /// their TTL); blocks up to per_node_timeout otherwise. The local state is
  /// cleared and renewal stopped first, whatever the outcome.
  /// Throws LockError if not held; LockNotOwned if more than N − Q nodes no
  /// longer hold our token (the lease expired or was taken); QuorumError if
  /// too few nodes answered to confirm (the keys then expire by their TTL).
  /// Both failures are also signalled as a loss (lost(), on_lost: taken,
  /// resp. unreachable): the caller cannot know it held the lock until here.
  void release() override;

  /// Extends the lease on a majority: every node holding our token gets
  /// `additional` more milliseconds (or exactly `additional` with
  /// replace_ttl); a node that lost the key gets it back with our token.
  /// Blocks up to per_node_timeout. On success validity_deadline() moves
  /// accordingly.
  /// Throws ConfigError if additional ≤ 0; LockError if not held;
  /// LockNotOwned when the lease is lost (more than N − Q nodes hold another
  /// token, or the extension was confirmed only after the validity ended —
  /// the loss is signalled); QuorumError when too few nodes answered (the
  /// lease stays valid until validity_deadline()).
  void extend(std::chrono::milliseconds additional, bool replace_ttl = false) override;

  /// extend(options().ttl, /*replace_ttl=*/true). Throws like extend().
  void reacquire() override;

  /// Asks every node (in parallel) whether it holds this object's token.
  /// Returns true if at least Q do, false if not held locally or more than
  /// N − Q answered otherwise. Throws QuorumError if too few nodes answered
  /// to decide.
  bool owned() override;

  /// Whether a majority of nodes have the key (any owner). Throws
  /// QuorumError if too few nodes answered to decide.
  bool locked() override;

  /// The time until fewer than Q nodes still have the key: the Q-th largest
  /// PTTL among the nodes; nullopt if fewer than Q nodes have it;
  /// milliseconds::max() for keys without expiry. Throws QuorumError if too
  /// few nodes answered to decide.
  std::optional<std::chrono::milliseconds> remaining_ttl() override;

  /// The steady_clock instant until which the current lease is guaranteed
  /// (start + ttl − drift of the last acquisition, extension or renewal).
  /// time_point::min() when not held. Unlike redsync's old Valid(), this
  /// never claims a lease past its end: compare it with Clock::now(). Local,
  /// no round trip; safe to call while the watchdog renews.
  Clock::time_point validity_deadline() const noexcept;

  /// max(0, validity_deadline() − now), in whole milliseconds (rounded down).
  std::chrono::milliseconds validity() const noexcept;

  /// N, and the majority Q = N/2 + 1.
  std::size_t node_count() const noexcept;
  std::size_t quorum() const noexcept;
  /// The per-node timeout in effect (after the automatic choice).
  std::chrono::milliseconds per_node_timeout() const noexcept;
  /// The nodes' "host:port" endpoints, in construction order.
  std::vector<std::string> endpoints() const;
  const RedlockOptions& redlock_options() const noexcept;

 protected:
  /// Throws LockError if already held. Returns false when the deadline
  /// passes while other owners hold the key (try_lock(): after one attempt).
  /// Never waits for slow or unreachable nodes past the deadline by more
  /// than a few milliseconds (each fan-out still gets one ≤ 5 ms round trip).
  /// Throws QuorumError when attempts could not possibly win a majority
  /// because too many nodes failed, or won one only after its validity had
  /// ended: after 3 such attempts in a row (retried with the random delay),
  /// or at once for try_lock() or when the deadline has passed.
  bool acquire_until(Clock::time_point deadline) override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockon
