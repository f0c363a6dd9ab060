// The async client's pub/sub connection: one per AsyncClient (and node),
// shared by every waiting AsyncLock, the async counterpart of Subscriber.
//
// Waiters of lock K listen on wake_channel(K, id()) (lock_scripts.hpp); a
// release that hands K to one of them publishes "<waiter id> <fence>" there.
// Subscriptions are counted per channel: 10,000 coroutines waiting on 100
// keys use 100 channels on this one connection, and no thread. A channel is
// unsubscribed when its last waiter has been gone for a linger, and a
// refused one asked for again only after a while: the blocking
// Subscriber's rules (client/channel_rules.hpp).
//
// A waiter's wake-up is a flag in its Slot plus a timer cancelled to wake it
// (the timer's expiry is the waiter's next poll). If the connection drops,
// every waiter is nudged (it retries at once and then polls every
// wait_poll_interval); the connection is reopened after a short delay while
// anyone waits, and their channels are subscribed again. A channel the
// server refuses (-NOPERM) is marked denied: its waiters rely on polling.
//
// Redis Cluster (sharded): one subscriber per master, all with the same id
// (queue entries stay valid when a slot moves), on sharded pub/sub
// (SSUBSCRIBE; the scripts SPUBLISH). A channel whose slot leaves the node
// (a server-sent sunsubscribe, or MOVED/ASK/CLUSTERDOWN/TRYAGAIN to an
// SSUBSCRIBE) nudges its waiters: they retry, and follow the slot to its
// new master's subscriber (AsyncLockImpl::wait_for_turn).
//
// Runs on the client's executor only (see async_connection.hpp).
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "async/async_connection.hpp"

namespace lockon::detail {

class AsyncSubscriber : public std::enable_shared_from_this<AsyncSubscriber> {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Wake { timeout, nudged, handed, cancelled };

  /// One waiting acquisition.
  struct Slot {
    explicit Slot(const asio::any_io_executor& executor) : timer(executor) {}
    std::string channel;
    bool handed = false;
    bool nudged = false;
    bool waiting = false;
    std::uint64_t fence = 0;
    /// The connection and subscription (connection_generation()) that
    /// delivered the hand-over message: set with `handed`.
    std::uint64_t handed_generation = 0;
    asio::steady_timer timer;
    void wake() noexcept {
      if (waiting) timer.cancel();
    }
  };

  /// RAII registration of a waiter (unsubscribes its channel when the last
  /// waiter on it leaves).
  class Watch {
   public:
    Watch(std::shared_ptr<AsyncSubscriber> owner, std::string id, std::shared_ptr<Slot> slot)
        : owner_(std::move(owner)), id_(std::move(id)), slot_(std::move(slot)) {}
    Watch(Watch&&) noexcept = default;
    Watch& operator=(Watch&&) = delete;
    ~Watch() {
      if (owner_) owner_->unwatch(id_);
    }
    Slot& slot() const noexcept { return *slot_; }

   private:
    std::shared_ptr<AsyncSubscriber> owner_;
    std::string id_;
    std::shared_ptr<Slot> slot_;
  };

  AsyncSubscriber(asio::any_io_executor executor, ConnectionOptions options,
                  std::chrono::milliseconds reconnect_delay, bool sharded = false, std::string id = {});
  ~AsyncSubscriber();
  AsyncSubscriber(const AsyncSubscriber&) = delete;
  AsyncSubscriber& operator=(const AsyncSubscriber&) = delete;

  /// Random id naming this subscriber's channels (queue entries carry it).
  const std::string& id() const noexcept { return id_; }

  /// Registers waiter `waiter_id` for messages on `channel`. No I/O wait.
  Watch watch(const std::string& waiter_id, const std::string& channel);

  /// Waits until the channel's subscription is confirmed (or denied, or the
  /// connection is down), at most until `until`. Returns whether confirmed.
  asio::awaitable<bool> wait_subscribed(Watch& watch, Clock::time_point until);

  /// Sleeps until handed the lock, nudged, `until`, or the awaiting
  /// coroutine is cancelled. Clears the nudge.
  asio::awaitable<Wake> wait_until(Watch& watch, Clock::time_point until);

  /// Names the current connection and the subscription of `watch`'s
  /// channel on it while that is confirmed; 0 otherwise (never a message's). A waiter samples it
  /// before each attempt: a hand-over message carrying the same value
  /// (Slot::handed_generation) came over a connection that stayed up since
  /// that attempt (async_lock.cpp: a message delivered by a replica is no
  /// grant).
  std::uint64_t connection_generation(const Watch& watch) const noexcept;

  /// Closes the connection; waiters poll from then on.
  void close() noexcept;

  /// Channels subscribed now (for tests).
  std::size_t subscribed_channels() const noexcept;

 private:
  struct Channel {
    std::size_t waiters = 0;
    int outstanding = 0;  // SUBSCRIBE/UNSUBSCRIBE sent, not confirmed yet
    bool subscribed = false;
    bool denied = false;
    bool moved = false;          // denied: its slot is another master's
    Clock::time_point idle_since{};  // the last waiter left (subscribed, lingering)
    Clock::time_point denied_at{};
    // Bumped by every confirmed (re)subscription: on a Cluster a server can
    // drop the channel (slot moved, master demoted) and take it back on the
    // same connection, as a replica (the blocking Subscriber's rule).
    std::uint64_t epoch = 0;
  };
  // What connection_generation() and Slot::handed_generation carry: the
  // connection and the subscription on it.
  std::uint64_t subscription_generation(const Channel& channel) const noexcept {
    return (generation_ << 32) + (channel.epoch & 0xffffffffULL);
  }

  void unwatch(const std::string& waiter_id) noexcept;
  void send(std::string_view verb, const std::string& channel);
  void on_push(ReplyPtr reply);
  void on_state(bool up);
  void wake_channel_waiters(const std::string& channel, bool nudge = false) noexcept;
  std::string_view verb(bool subscribe) const noexcept {
    if (sharded_) return subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE";
    return subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE";
  }
  void schedule_reconnect();
  // Unsubscribes the channels whose linger ended, asks again for refused
  // ones whose retry is due (or forgets them without waiters), and waits
  // for the next such moment (maintenance_timer_).
  void maintain() noexcept;
  void schedule_maintenance(Clock::time_point at);

  asio::any_io_executor executor_;
  const std::string id_;
  std::chrono::milliseconds reconnect_delay_;
  std::shared_ptr<AsyncConnection> connection_;
  std::map<std::string, Channel> channels_;
  std::unordered_map<std::string, std::shared_ptr<Slot>> waiters_;  // by waiter id
  // Unconfirmed (UN)SUBSCRIBEs, in send order: replies come in that order,
  // so an error reply names its command by position.
  struct Pending {
    bool subscribe = true;
    std::string channel;
  };
  std::deque<Pending> pending_;
  asio::steady_timer reconnect_timer_;
  bool reconnect_scheduled_ = false;
  asio::steady_timer maintenance_timer_;
  Clock::time_point maintenance_at_ = Clock::time_point::max();  // max: not scheduled
  bool handlers_set_ = false;
  bool closed_ = false;
  bool sharded_ = false;
  std::uint64_t generation_ = 0;  // bumped by every connect and drop (on_state)
};

}  // namespace lockon::detail
