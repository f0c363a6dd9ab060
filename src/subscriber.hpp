// The process's pub/sub connection to one server, shared by every waiter.
//
// Waiters sleep until a release publishes their id on the lock's channel.
// One connection and one thread per server serve every waiting lock and
// thread; channels are reference-counted and unsubscribed when nobody waits.
// If the connection drops, every waiter is woken (they retry and fall back
// to polling) and the thread reconnects and re-subscribes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "connection.hpp"

namespace lockon::detail {

class Subscriber {
 public:
  using Clock = std::chrono::steady_clock;

  /// One waiting acquisition: woken by a message carrying its id.
  struct Slot {
    std::mutex mutex;
    std::condition_variable cv;
    bool woken = false;
    /// Sleeps until woken or `until`; clears the flag. Returns whether woken.
    bool wait_until(Clock::time_point until);
  };

  /// RAII registration of a waiter on a channel.
  class Watch {
   public:
    Watch(Watch&& other) noexcept;
    Watch& operator=(Watch&&) = delete;
    ~Watch();
    Slot& slot() const noexcept { return *slot_; }
    /// Waits (bounded) until the server confirmed the subscription. Returns
    /// false if it did not in time (the waiter then relies on polling).
    bool wait_subscribed(Clock::time_point until) const;

   private:
    friend class Subscriber;
    Watch(Subscriber* owner, std::string channel, std::string id, std::shared_ptr<Slot> slot)
        : owner_(owner), channel_(std::move(channel)), id_(std::move(id)), slot_(std::move(slot)) {}
    Subscriber* owner_;
    std::string channel_;
    std::string id_;
    std::shared_ptr<Slot> slot_;
  };

  explicit Subscriber(ConnectionOptions options);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  /// Registers waiter `id` on `channel` (subscribing if it is the first).
  /// Never blocks on I/O.
  Watch watch(const std::string& channel, const std::string& id);

  /// Number of channels currently subscribed or being subscribed (tests).
  std::size_t channel_count() const;

 private:
  enum class SubState { none, subscribing, subscribed, unsubscribing };
  struct Channel {
    std::size_t refs = 0;
    SubState state = SubState::none;
    std::map<std::string, std::shared_ptr<Slot>> waiters;
  };

  void unwatch(const std::string& channel, const std::string& id) noexcept;
  void run();
  bool connect_and_resubscribe();
  void send_pending();
  void read_messages();
  void on_message(const redisReply& reply);
  void drop_connection() noexcept;
  void wake_all_locked() noexcept;
  void poke() noexcept;

  ConnectionOptions options_;
  Connection connection_;
  int event_fd_ = -1;
  mutable std::mutex mutex_;
  std::condition_variable confirmed_;
  std::map<std::string, Channel> channels_;
  bool connected_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockon::detail
