// The node layer of Redlock: N clients contacted in parallel through
// fan_out, the Redlock Lua scripts, per-node reply classification and the
// NodeEvent reporting (with tokens redacted).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/connection.hpp"
#include "client/hiredis_handles.hpp"
#include "lockon/client.hpp"
#include "lockon/redlock.hpp"
#include "client/script.hpp"

namespace lockon::detail {

namespace redlock_scripts {

/// KEYS: lock, fence counter. ARGV: token, ttl ms.
/// SET NX PX, and returns {1 if granted else 0, the node's counter as a
/// decimal string ("0" when absent), the node's TIME in microseconds as a
/// decimal string}. The counter is read first, so a counter of the wrong
/// type fails the script before anything is written.
const Script& acquire_fenced();

/// KEYS: lock, fence counter. ARGV: token, fence (canonical decimal),
/// counter ttl ms. Raises the counter to the fence if it is lower (never
/// lowers it, whoever holds the lock: a max-update is always safe) and
/// (re)sets the counter's expiry; returns 1 if the lock key still holds our
/// token (the acknowledgement that counts), else 0.
const Script& write_fence();

/// KEYS: lock. ARGV: token, ms, mode ("add" | "set" | "grow"), ms for a
/// missing key. Our key: add → PTTL + ms; set → ms; grow → ms if longer than
/// PTTL. Returns 1. Missing key: re-created with our token and the last
/// argument as PX; returns 2. Another token: untouched; returns 0.
const Script& extend();

/// KEYS: lock. ARGV: token. Deletes the key if it holds the token: 1;
/// missing: 0; another token: -1.
const Script& release();

}  // namespace redlock_scripts

/// One node's answer to one fan-out.
struct NodeReply {
  ReplyPtr reply;                        // set when an answer was read (may be an error reply)
  std::exception_ptr error;              // set when the node could not be talked to
  std::chrono::microseconds elapsed{0};  // fan-out start → answer (or failure)
  bool sent = false;                     // the request was written (false: the node certainly did not run it)
  bool abandoned = false;                // not waited for: the others' replies decided

  /// An answer that is not an error reply.
  bool answered() const noexcept { return reply && !is_error_reply(*reply); }
  /// The failure as text (exception message or error reply); "" if answered.
  std::string error_text() const;
};

/// Validity arithmetic: the drift allowance of a lease of `ttl`.
std::chrono::steady_clock::duration drift_allowance(std::chrono::milliseconds ttl, double drift_factor);

/// Canonical unsigned decimal ("0", or no leading zero), ≤ UINT64_MAX.
std::optional<std::uint64_t> parse_counter(std::string_view text) noexcept;

/// One node's fence candidate from its acquire_fenced reply:
/// max(counter + 1, TIME in µs), saturating at UINT64_MAX; nullopt for a
/// reply of the wrong shape or a counter/time that is not a canonical
/// decimal.
std::optional<std::uint64_t> fence_candidate(const redisReply& reply) noexcept;

/// The automatic per-node timeout for a TTL (see RedlockOptions).
std::chrono::milliseconds auto_per_node_timeout(std::chrono::milliseconds ttl) noexcept;

/// How a node's reply votes on the question a fan-out asks, for stopping
/// early: yes (e.g. "granted"), no (e.g. "held by another owner", an error
/// reply). Failures to reply count as no.
enum class Vote { yes, no };
using Voter = std::function<Vote(const redisReply&)>;

/// The N clients of a Redlock. Immutable after construction; every member
/// may be called from any thread (the clients' pools are thread-safe).
class RedlockNodes {
 public:
  using Clock = std::chrono::steady_clock;

  /// Throws ConfigError for no clients or a repeated endpoint.
  RedlockNodes(std::vector<Client> clients, std::string name, std::chrono::milliseconds per_node_timeout,
               std::function<void(const NodeEvent&)> on_event);

  std::size_t size() const noexcept { return clients_.size(); }
  std::size_t quorum() const noexcept { return clients_.size() / 2 + 1; }
  std::chrono::milliseconds per_node_timeout() const noexcept { return per_node_timeout_; }
  const std::string& endpoint(std::size_t node) const noexcept { return endpoints_[node]; }
  const std::vector<std::string>& endpoints() const noexcept { return endpoints_; }
  const std::string& name() const noexcept { return name_; }

  /// Sends `args` to every node at once (connecting in parallel where
  /// needed); replies within `timeout` (default: per_node_timeout) of the
  /// start, and not after `not_after` (see window()). Blocks that long at
  /// most. Never throws for a node's failure.
  std::vector<NodeReply> command(std::span<const std::string_view> args, std::string_view operation,
                                 std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                                 Clock::time_point not_after = Clock::time_point::max(),
                                 const Voter& voter = {}) const;

  /// Runs `script` on every node at once (EVALSHA, EVAL after NOSCRIPT);
  /// bounded as command() with per_node_timeout.
  ///
  /// With a `voter`, both stop waiting once the outcome is decided: a
  /// majority voted yes, or more than N - majority cannot (voted no or
  /// failed). Nodes not waited for then carry an error marked `abandoned`
  /// (a frozen minority costs nothing); their request may still run there
  /// later, so callers use this only where a late execution is harmless
  /// (our own token's key, which expires by its TTL).
  std::vector<NodeReply> script(const Script& script, std::span<const std::string_view> keys,
                                std::span<const std::string_view> args, std::string_view operation,
                                Clock::time_point not_after = Clock::time_point::max(),
                                const Voter& voter = {}) const;

  /// Runs `script` on node `node` in the background (lock/orphans.hpp),
  /// retried until the node answers or `give_up_at` passes (when the key it
  /// targets has expired anyway). For a release the fan-out could not even
  /// send to a node (its connection was still being dialed when the other
  /// nodes decided, or failed): a healthy node must not keep the key for a
  /// whole TTL. Bounded so that a node that is really down cannot keep
  /// the process's shared clean-up thread busy: at most one such job per
  /// server and process at a time (later ones are left to the TTL), at most
  /// kBackgroundAttempts attempts, each within per_node_timeout(). Never
  /// blocks on I/O, never throws.
  void run_in_background(std::size_t node, const Script& script, std::vector<std::string> keys,
                         std::vector<std::string> args, Clock::time_point give_up_at) const noexcept;

  /// The least a fan-out cut short by a caller's deadline still waits: one
  /// round trip to a healthy node (replies are read up to there).
  static constexpr std::chrono::milliseconds kOneRoundTrip{5};
  /// The deadline of a fan-out starting at `start`: start + timeout, but
  /// not after `not_after` (a caller's deadline), save one round trip.
  static Clock::time_point window(Clock::time_point start, std::chrono::milliseconds timeout,
                                  Clock::time_point not_after) noexcept;

  /// Whether anyone listens (skip building details when not).
  bool reporting() const noexcept { return static_cast<bool>(on_event_); }
  /// Reports one node's result; `token` (if non-empty) is redacted from the
  /// detail. Never throws.
  void report(std::size_t node, NodeOperation operation, NodeOutcome outcome, std::string detail,
              std::chrono::microseconds elapsed, std::string_view token) const noexcept;

 private:
  std::vector<NodeReply> run(const std::function<void(Connection&)>& send,
                             const std::function<ReplyPtr(Connection&, ReplyPtr)>& finish, std::string_view operation,
                             std::chrono::milliseconds timeout, Clock::time_point not_after, const Voter& voter) const;

  // Nodes abandoned by a decided fan-out are suspected frozen: the next
  // fan-outs decide without waiting for them, except one every
  // kSuspectProbeEvery, which gives them the grace period to rejoin.
  static constexpr std::chrono::milliseconds kSuspectProbeEvery{100};
  bool grace_for(std::size_t node) const noexcept;
  void note_outcome(std::size_t node, bool abandoned, bool answered) const noexcept;

  std::vector<Client> clients_;
  std::vector<std::string> endpoints_;
  // Per node: steady-clock ns of its next probe while suspected; 0: trusted.
  std::unique_ptr<std::atomic<std::int64_t>[]> next_probe_ns_;
  static constexpr int kBackgroundAttempts = 3;
  std::string name_;
  std::chrono::milliseconds per_node_timeout_;
  std::function<void(const NodeEvent&)> on_event_;
};

/// Replaces every occurrence of `secret` in `text` with "<token>".
std::string redact(std::string text, std::string_view secret);

/// How one node answered, as decided by an operation's classifier. Details
/// are static strings: nothing is formatted unless someone reads it.
struct Verdict {
  NodeOutcome outcome;
  std::string_view detail;
};

/// The verdict for a reply of the wrong shape.
inline Verdict unexpected_reply() noexcept { return {NodeOutcome::failed, "unexpected reply"}; }

/// Tally of one fan-out; per-node texts are kept for failures only (error
/// messages), so the success path formats nothing.
struct Tally {
  std::size_t ok = 0;
  std::size_t refused = 0;
  std::size_t failed = 0;
  std::vector<NodeOutcome> outcomes;                           // per node
  std::vector<std::pair<std::size_t, std::string>> failures;  // node, error text

  /// "a:1, b:2" (or "none"): the nodes with this outcome.
  std::string nodes_with(const RedlockNodes& nodes, NodeOutcome outcome) const;
  /// "a:1 (error); b:2 (error)" (or "none").
  std::string failed_nodes(const RedlockNodes& nodes) const;
  /// "1 of 3 nodes (a majority is 2); ok: ...; refused: ...; failed: ...".
  std::string summary(const RedlockNodes& nodes) const;
};

/// Classifies each answered reply with `classify(node, reply) -> Verdict`
/// (unanswered ones fail with their error text, token redacted), reports
/// every node through the hook and tallies the outcomes.
template <class Classify>
Tally settle(const RedlockNodes& nodes, std::vector<NodeReply>& replies, NodeOperation operation,
             std::string_view token, Classify&& classify) {
  Tally tally;
  tally.outcomes.reserve(replies.size());
  for (std::size_t i = 0; i < replies.size(); ++i) {
    Verdict verdict{NodeOutcome::failed, {}};
    std::string error;
    if (replies[i].answered()) verdict = classify(i, *replies[i].reply);
    if (verdict.outcome == NodeOutcome::failed)
      error = verdict.detail.empty() ? redact(replies[i].error_text(), token) : std::string(verdict.detail);
    switch (verdict.outcome) {
      case NodeOutcome::ok: ++tally.ok; break;
      case NodeOutcome::refused: ++tally.refused; break;
      case NodeOutcome::failed: ++tally.failed; break;
    }
    tally.outcomes.push_back(verdict.outcome);
    if (nodes.reporting())
      nodes.report(i, operation, verdict.outcome, error.empty() ? std::string(verdict.detail) : error,
                   replies[i].elapsed, token);
    if (verdict.outcome == NodeOutcome::failed) tally.failures.emplace_back(i, std::move(error));
  }
  return tally;
}

}  // namespace lockon::detail
