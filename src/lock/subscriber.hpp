// The process's pub/sub connection to one server, shared by every waiter.
//
// A waiter for lock K listens on channel "{K}:wake:<subscriber id>": derived
// from the lock key (same hash slot, so a sharded SPUBLISH can replace
// PUBLISH in a cluster) and private to this subscriber (one per Client,
// i.e. usually one per process and server). A release that hands K to one
// of its waiters publishes "<waiter id> <fence>" there, and PUBLISH's
// receiver count tells the script whether this very subscriber is alive.
// One connection and one thread per server serve every waiting lock and
// thread: subscriptions are reference-counted per channel (1,000 threads
// waiting on 100 keys: 100 channels on one connection). A channel stays
// subscribed while anyone waits on it and for a short linger after the last
// waiter left, so a process that contends repeatedly does not pay
// SUBSCRIBE/UNSUBSCRIBE (and the confirmation's round trip) on every
// acquisition. If the connection drops, every waiter is nudged: they retry
// and poll until their subscription is back.
//
// Who reads the socket: normally this thread, which then wakes the waiter
// it concerns. When a process has a single waiter on a live subscription,
// that waiter reads the socket itself (the "direct reader") and sees its
// hand-off without a second thread wake-up in between; every other message
// it reads is dispatched as this thread would. Only one thread reads at a
// time (io_mutex_), and reads never block (MSG_DONTWAIT), so a message the
// other reader consumed first costs nothing but a look.
//
// A server may refuse a SUBSCRIBE (-NOPERM: an ACL user without the channel
// permission, Redis 7's default `acl-pubsub-default resetchannels`). The
// channel is then marked denied: its waiters stop waiting for a
// confirmation and rely on their periodic attempts (wait_poll_interval), the
// subscription is retried only after channel_rules::kDeniedRetry, and the
// operator hears about it once per server through the warning handler.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "client/channel_rules.hpp"
#include "client/connection.hpp"
#include "client/topology.hpp"
#include "common/test_hooks.hpp"
#include "lock/handoff_spin.hpp"

namespace lockon::detail {

/// One waiting acquisition.
struct WaitSlot {
  enum class Wake { timeout, nudged, handed };
  std::mutex mutex;
  std::condition_variable cv;
  bool nudged = false;
  bool handed = false;
  bool reevaluate = false;  // became the only waiter: may read directly now
  std::uint64_t fence = 0;
  /// The connection (Watch::connection_generation()) that delivered the
  /// hand-over message: set with `handed`.
  std::uint64_t handed_generation = 0;
  /// Sleeps until handed the lock, nudged, asked to re-evaluate (reported
  /// as timeout, with `reevaluate` left set), or `until`. Clears the nudge.
  Wake wait_until(std::chrono::steady_clock::time_point until);
};

class Subscriber final : public NodeService {
 public:
  using Clock = std::chrono::steady_clock;

  using Slot = WaitSlot;

  /// RAII registration of a waiter.
  class Watch {
   public:
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    ~Watch();
    Slot& slot() const noexcept { return *slot_; }
    /// Names the subscriber's current connection and our channel's
    /// subscription on it while that is confirmed; 0 otherwise (never a
    /// message's). A
    /// waiter samples it before each attempt: a hand-over message later
    /// carrying the same value (Slot::handed_generation) came over a
    /// connection that stayed up since that attempt (lock_wait.cpp,
    /// wake_trusted: a message delivered by a replica is no grant).
    std::uint64_t connection_generation() const;
    /// Waits (bounded) until the server confirmed our subscription. Returns
    /// false if not in time: the waiter then cannot be handed the lock by
    /// message and relies on its periodic attempts.
    bool wait_subscribed(Clock::time_point until) const;
    /// Sleeps until handed the lock, nudged, or `until`; reads the socket
    /// itself when it is the process's only waiter, and then polls it
    /// without sleeping during `spin` (handoff_spin.hpp). Clears the nudge.
    Slot::Wake wait_until(Clock::time_point until, SpinWindow spin = {});
    /// How often the lock of this channel has been changing hands, as this
    /// process saw it (0: not measured yet, or from one hand-over only: an
    /// attempt sent late in a turn, e.g. by a thread just started or
    /// descheduled, makes one short sample of a slow key). Thread-safe.
    std::chrono::nanoseconds handoff_interval() const;
    /// A hand-over came `waited` after an attempt that found `ahead`
    /// entries before ours: updates handoff_interval(). Thread-safe.
    void note_handoff(std::chrono::nanoseconds waited, long long ahead) const;

   private:
    friend class Subscriber;
    Watch(Subscriber* owner, std::string id, std::string channel, std::shared_ptr<Slot> slot)
        : owner_(owner), id_(std::move(id)), channel_(std::move(channel)), slot_(std::move(slot)) {}
    Subscriber* owner_;
    std::string id_;
    std::string channel_;
    std::shared_ptr<Slot> slot_;
  };

  /// Starts the thread; connects when the first waiter registers.
  /// `sharded`: SSUBSCRIBE/SUNSUBSCRIBE (Redis Cluster shard channels,
  /// see lock_scripts.hpp); a server-sent `sunsubscribe` or a -MOVED answer
  /// to SSUBSCRIBE means the channel's slot left this node: its waiters are
  /// nudged (their next attempt follows the MOVED and they re-route, see
  /// lock.cpp) and the channel is asked for again after channel_rules::kMovedRetry.
  /// `id`: empty for a random one.
  explicit Subscriber(ConnectionOptions options, bool sharded = false, std::string id = {});
  ~Subscriber() override;
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  /// Registers waiter `id` (unique in this process) for messages on
  /// `channel` (see wake_channel()). Never blocks on I/O.
  Watch watch(const std::string& id, const std::string& channel);

  /// Random id naming this subscriber's channels (queue entries carry it).
  const std::string& id() const noexcept override { return id_; }

 private:
  enum class SubState { none, subscribing, subscribed, unsubscribing, denied };

  void unwatch(const std::string& id) noexcept;
  void run();
  bool connect();
  int sync_subscription();
  // Reads what has arrived on connection `generation` and dispatches it.
  // Never blocks. `direct` = called by the direct reader.
  void read_available(std::uint64_t generation, bool direct) noexcept;
  void on_message(const redisReply& reply, bool direct);
  // Caller holds mutex_. An error reply answers the oldest pending command;
  // a refused SUBSCRIBE marks its channel denied. Returns the warning to
  // report (empty topic: none), for the caller to send once unlocked.
  struct Warning {
    std::string topic;
    std::string message;
  };
  Warning on_error_reply(std::string_view text, bool direct);
  // Caller holds io_mutex_.
  void drop_connection() noexcept;
  void poke() noexcept;
  void poke_reader() noexcept;
  // Direct reading (see the header comment).
  bool become_reader(Slot& slot, int& fd, std::uint64_t& generation);
  void read_directly(int fd, std::uint64_t generation, Clock::time_point until, SpinWindow spin) noexcept;
  void leave_reader() noexcept;

  const std::string id_;
  const bool sharded_;
  // Serializes every use of connection_ (reads, writes, reconnects). Taken
  // before mutex_, never while holding it.
  std::mutex io_mutex_;
  Connection connection_;
  int event_fd_ = -1;   // wakes this thread
  int reader_fd_ = -1;  // wakes the direct reader
  mutable std::mutex mutex_;
  const Slot* direct_reader_ = nullptr;
  // Whether this thread polled the socket when it last looked. It leaves the
  // socket to a lone waiter on a live subscription (who reads directly), so
  // the two do not race for every message.
  bool thread_reads_ = true;
  int connection_fd_ = -1;           // socket of the live connection
  std::uint64_t generation_ = 0;     // bumped by every (re)connect and drop
  std::condition_variable confirmed_;
  struct Waiter {
    std::shared_ptr<Slot> slot;
    std::string channel;
  };
  struct Channel {
    std::size_t waiters = 0;
    SubState state = SubState::none;  // what the server has (or is getting)
    Clock::time_point idle_since{};   // when its last waiter left
    Clock::time_point denied_at{};    // when the server refused it
    bool moved = false;               // denied because its slot moved (sharded)
    std::chrono::nanoseconds handoff_interval{0};  // Watch::handoff_interval()
    unsigned handoff_samples = 0;                   // hand-overs it averages (saturates)
    // Bumped by every confirmed (re)subscription: on a Cluster a server can
    // drop the channel (slot moved, master demoted) and take it back on the
    // same connection, as a replica (ClusterWakeTrust.WakeUpDeliveredByADemotedMasterIsNotAGrant).
    std::uint64_t epoch = 0;
  };
  // What connection_generation() and handed_generation carry: the
  // connection and the subscription on it (caller holds mutex_).
  std::uint64_t subscription_generation(const Channel& channel) const {
    return (generation_ << 32) + (channel.epoch & 0xffffffffULL);
  }
  // SUBSCRIBE/UNSUBSCRIBE commands sent (one channel each) whose reply has
  // not arrived, oldest first: replies come in this order, so an error reply
  // names its channel by position.
  struct Pending {
    bool subscribe = true;
    std::string channel;
  };
  std::deque<Pending> pending_;
  // Caller holds mutex_.
  bool subscribed(const std::string& channel) const;
  bool denied(const std::string& channel) const;
  bool lone_waiter_subscribed() const;

  // Caller holds mutex_: marks `channel` as moved away and nudges its waiters
  // (poking the direct reader among them unless it is the caller: `direct`).
  void slot_moved(Channel& channel, const std::string& name, bool direct);

  std::map<std::string, Waiter> waiters_;    // by waiter id
  std::map<std::string, Channel> channels_;  // by channel name
  bool connected_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

/// The wake-up subscriber of `node` (its NodeService), started on first use.
Subscriber& subscriber_of(Node& node);

}  // namespace lockon::detail
