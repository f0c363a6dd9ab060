// The shared state behind an AsyncClient handle: the command connection,
// the pub/sub subscriber (made on first wait) and the background clean-up
// of abandoned acquisitions. Everything runs on the client's executor.
//
// Sentinel (async_sentinel.hpp): the command connection and subscriber are
// the current master's. Resolution runs on first use and again after the
// master answered READONLY (demoted) or failed with an I/O error — at most
// one resolution at a time (others wait for it), at most one every
// kResolveEvery — or at once after any sentinel of the URL published news
// of a failover of our master (client/sentinel_events.hpp; one background
// subscription per sentinel, like the blocking front's listener threads: a
// demoted master can take seconds to say READONLY, and writes accepted
// meanwhile would be lost). A switch retires the old connection once its owed replies
// came (bounded) and closes the old subscriber (its waiters poll).
//
// Cluster (async_cluster.hpp): no single connection; every request goes to
// the master serving its key's slot (command: args[1]; script: KEYS[1];
// pipeline: the first command with a key), following MOVED/ASK; waiters use
// that master's sharded subscriber (subscriber_for).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <optional>
#include <vector>

#include "async/async_cluster.hpp"
#include "async/async_connection.hpp"
#include "async/async_subscriber.hpp"
#include "client/script.hpp"
#include "async/async_sentinel_listener.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/async.hpp"

namespace lockon::detail {

class AsyncClientImpl : public std::enable_shared_from_this<AsyncClientImpl> {
 public:
  using Clock = std::chrono::steady_clock;
  using Ended = AsyncConnection::Ended;

  /// One reply, or why there is none (deadline, cancelled: outcome unknown).
  struct Answer {
    Ended ended = Ended::replied;
    ReplyPtr reply;
  };

  AsyncClientImpl(asio::any_io_executor executor, ConnectionOptions options, AsyncClientOptions limits);
  ~AsyncClientImpl();

  static constexpr auto kResolveEvery = std::chrono::milliseconds(100);

  const asio::any_io_executor& executor() const noexcept { return executor_; }
  const ConnectionOptions& options() const noexcept { return options_; }
  const std::string& endpoint() const noexcept { return endpoint_; }
  /// The current command connection (standalone: the only one; not Cluster).
  AsyncConnection& connection() noexcept { return *connection_; }
  /// Cluster: wake-ups go over sharded pub/sub (scripts::*(sharded())).
  bool sharded() const noexcept { return cluster_ != nullptr; }
  /// Cluster state (null otherwise; tests).
  AsyncCluster* cluster() const noexcept { return cluster_.get(); }
  /// Master switches seen (Sentinel; tests).
  std::uint64_t switches() const noexcept { return switches_; }

  /// One command; error replies are thrown (mapped), as LockCalls does.
  asio::awaitable<Answer> command(std::span<const std::string_view> args, std::string_view operation,
                                  Clock::time_point until);
  /// EVALSHA, redone as EVAL on NOSCRIPT; error replies are thrown.
  asio::awaitable<Answer> script(const Script& script, std::span<const std::string_view> keys,
                                 std::span<const std::string_view> args, std::string_view operation,
                                 Clock::time_point until);
  /// Several commands in one request; error replies are returned.
  asio::awaitable<AsyncConnection::Outcome> pipeline(std::span<const std::span<const std::string_view>> commands,
                                                     std::string_view operation, Clock::time_point until);

  /// The pub/sub connection of the current node (made on first use). Hold
  /// the pointer for the whole wait: a Sentinel switch replaces it.
  std::shared_ptr<AsyncSubscriber> subscriber();
  /// The subscriber of the master as this client knows it now, made or
  /// not (null: none yet, or the master switched since). No I/O.
  const std::shared_ptr<AsyncSubscriber>& subscriber_if_made() const noexcept { return subscriber_; }
  /// The id under which this client's locks queue: subscriber()'s if it
  /// was made (else empty: none of them has waited), or a Cluster's
  /// (the same on every master). Makes nothing.
  std::string subscriber_id_if_made() const;
  /// The subscriber that hears of hand-overs of `key`: subscriber(), or on
  /// a Cluster the sharded one of the master serving key's slot now (null
  /// when `until` passed while the map was read: the slot had no owner).
  asio::awaitable<std::shared_ptr<AsyncSubscriber>> subscriber_for(std::string key, Clock::time_point until);

  /// Runs the cancel-wait script for queue entry `entry` of lock `keys`
  /// (lock, queue, fence, record) in the background until it ran, on the
  /// blocking front's schedule (protocol/cleanup_schedule.hpp: retried at
  /// growing intervals for up to 10 minutes, swept again after its first
  /// success when `unknown_outcome`): removes the entry and passes the key
  /// on if it holds the entry's token. Keeps the executor's work outstanding
  /// meanwhile, until close(). Never throws.
  void abandon(LockScriptKeys keys, std::string entry, bool unknown_outcome = true) noexcept;

  /// A new acquisition of `key` with the custom token `token` begins: the
  /// background clean-ups of earlier attempts with that token (abandon())
  /// release whatever holds it, and must not run after it (two holders).
  /// Waits for one whose request is in flight (until `deadline`, at least
  /// 25 ms), then runs the pending ones once, now, and stops them. False
  /// if that could not be done (they are retried as before): the caller
  /// does not acquire. Runs on the client's executor.
  asio::awaitable<bool> forget_cleanups(std::string key, std::string token, Clock::time_point deadline);

  /// A release of lock `keys` with the custom token `token` begins: until
  /// release_ends(), forget_cleanups() waits for it as for a clean-up in
  /// flight (a release that fails files one for the token; a new
  /// acquisition with it, through any lock object, must come after that).
  std::uint64_t release_begins(const LockScriptKeys& keys, const std::string& token);
  void release_ends(std::uint64_t id) noexcept;
  /// An acquisition begins: the client is in use again after a close(),
  /// and its clean-ups retry on their schedule again.
  void acquisition_begins() noexcept;

  /// Runs `resp` (owing `replies` replies) on a connection of its own to
  /// the server this client's requests go to now (Sentinel: the master),
  /// one per request in flight (idle ones reused): WAIT holds back every
  /// reply after it on its connection, and the main one is every
  /// coroutine's. That connection has
  /// no stall check (a WAIT takes up to its timeout): `until` bounds the
  /// request. Not on a Cluster (ConfigError). Error replies are returned;
  /// I/O errors thrown.
  asio::awaitable<AsyncConnection::Outcome> exchange_aside(std::string resp, std::size_t replies,
                                                           Clock::time_point until, std::string_view operation);

  void close() noexcept;

 private:
  // The connection for the next request (Sentinel: resolves when stale).
  asio::awaitable<std::shared_ptr<AsyncConnection>> route(Clock::time_point until);
  struct OnMaster {
    std::shared_ptr<AsyncConnection> connection;  // the one that answered
    AsyncConnection::Outcome outcome;
  };
  // Not Cluster: `resp` (owing `replies` replies) to the one server or
  // Sentinel's current master; with Sentinel sent again after a READONLY as
  // ReadOnlyRetry says (client/retry_rules.hpp: the blocking front's rule).
  // Error replies are returned, I/O errors thrown (the master marked stale).
  asio::awaitable<OnMaster> on_master(std::string resp, std::size_t replies, Clock::time_point until,
                                      std::string_view operation);
  asio::awaitable<void> resolve(Clock::time_point until);
  // One resolution, run on its own (co_spawn): callers wait for it.
  asio::awaitable<void> resolve_now(std::shared_ptr<AsyncClientImpl> self);
  // Sentinel feedback: READONLY or an I/O failure from `used`.
  void mark_stale(const AsyncConnection& used) noexcept;
  void retire(std::shared_ptr<AsyncConnection> old) noexcept;
  // Failover news from the listener: the master is stale, at once.
  void on_sentinel_news(std::size_t sentinel, const SentinelNews& news) noexcept;

  asio::any_io_executor executor_;
  ConnectionOptions options_;
  AsyncClientOptions limits_;
  std::string endpoint_;
  std::shared_ptr<AsyncConnection> connection_;
  // exchange_aside()'s idle connections (to connection_'s server), at most
  // kMaxIdleAside.
  static constexpr std::size_t kMaxIdleAside = 4;
  std::vector<std::shared_ptr<AsyncConnection>> aside_idle_;
  std::shared_ptr<AsyncSubscriber> subscriber_;
  std::shared_ptr<AsyncCluster> cluster_;  // Cluster only
  // Sentinel only.
  bool sentinel_ = false;
  bool stale_ = true;
  bool resolving_ = false;
  bool urgent_ = false;  // failover news: resolve without the throttle
  std::shared_ptr<AsyncSentinelListener> listener_;  // started by the first resolution
  std::optional<NodeAddress> hint_;  // the new master the latest news named: probed first
  std::uint64_t news_ = 0;           // failover news heard (a resolution started before is stale)
  std::exception_ptr last_resolve_error_;
  Clock::time_point last_resolve_{};
  std::size_t preferred_ = 0;
  std::uint64_t switches_ = 0;
  // The background clean-ups (abandon()) still running, by id: forget_cleanups()
  // stops those of a token acquired again. Guarded: abandon() may be called
  // off the executor.
  struct Cleanup {
    LockScriptKeys keys;
    std::string entry;
    std::string token;
    bool unknown_outcome = true;  // swept again after its first success
    std::chrono::steady_clock::time_point adopted_at{};
    std::shared_ptr<asio::steady_timer> timer{};  // its wait for the next run
    bool running = false;    // its request is in flight
    bool forgotten = false;  // stop before its next attempt (forget_cleanups(), close())
    bool one_shot = false;   // filed after close(): one run, no retries
  };
  bool closed_ = false;  // close() ran and no acquisition began since (guarded by cleanups_mutex_)
  friend asio::awaitable<void> run_cleanup(std::shared_ptr<AsyncClientImpl> client, std::uint64_t id);
  std::mutex cleanups_mutex_;
  std::map<std::uint64_t, Cleanup> cleanups_;
  std::uint64_t next_cleanup_ = 0;
};

}  // namespace lockon::detail
