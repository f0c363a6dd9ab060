#include "async/async_subscriber.hpp"

#include <asio/experimental/as_tuple.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <charconv>

#include "client/channel_rules.hpp"
#include "client/connection.hpp"
#include "common/diagnostics.hpp"
#include "common/token.hpp"

namespace lockon::detail {

AsyncSubscriber::AsyncSubscriber(asio::any_io_executor executor, ConnectionOptions options,
                                 std::chrono::milliseconds reconnect_delay, bool sharded, std::string id)
    : executor_(std::move(executor)),
      id_(id.empty() ? new_subscriber_id() : std::move(id)),
      reconnect_delay_(reconnect_delay),
      connection_(std::make_shared<AsyncConnection>(executor_, std::move(options))),
      reconnect_timer_(executor_),
      maintenance_timer_(executor_),
      sharded_(sharded) {}

AsyncSubscriber::~AsyncSubscriber() { close(); }

void AsyncSubscriber::close() noexcept {
  closed_ = true;
  reconnect_timer_.cancel();
  maintenance_timer_.cancel();
  connection_->set_push_handler({});
  connection_->set_state_handler({});
  connection_->close();
}

std::uint64_t AsyncSubscriber::connection_generation(const Watch& watch) const noexcept {
  const auto entry = channels_.find(watch.slot().channel);
  if (closed_ || !connection_->connected() || entry == channels_.end() || !entry->second.subscribed ||
      entry->second.outstanding > 0)
    return 0;
  return subscription_generation(entry->second);
}

std::size_t AsyncSubscriber::subscribed_channels() const noexcept {
  std::size_t n = 0;
  for (const auto& [name, channel] : channels_) n += channel.subscribed ? 1 : 0;
  return n;
}

AsyncSubscriber::Watch AsyncSubscriber::watch(const std::string& waiter_id, const std::string& channel) {
  if (!handlers_set_) {
    handlers_set_ = true;
    // Handlers hold weak references: the connection's coroutines may outlive us.
    std::weak_ptr<AsyncSubscriber> weak = weak_from_this();
    connection_->set_push_handler([weak](ReplyPtr reply) {
      if (auto self = weak.lock()) self->on_push(std::move(reply));
    });
    connection_->set_state_handler([weak](bool up, std::exception_ptr) {
      if (auto self = weak.lock()) self->on_state(up);
    });
  }
  auto slot = std::make_shared<Slot>(executor_);
  slot->channel = channel;
  waiters_[waiter_id] = slot;
  Channel& entry = channels_[channel];
  if (++entry.waiters == 1 && !closed_) {
    if (entry.subscribed && entry.outstanding == 0) {
      // Lingering: still subscribed, nothing to send.
    } else if (entry.denied && Clock::now() < channel_rules::retry_at(entry.denied_at, entry.moved)) {
      // Refused a moment ago: its waiters poll until the retry is due.
      schedule_maintenance(channel_rules::retry_at(entry.denied_at, entry.moved));
    } else if (connection_->connected()) {
      // Subscribe now if up; a connection being opened subscribes every
      // channel with waiters once its handshake is through (on_state).
      entry.denied = false;
      entry.moved = false;
      send(verb(true), channel);
    } else {
      connection_->ensure_connected();
    }
  }
  return Watch(shared_from_this(), waiter_id, std::move(slot));
}

void AsyncSubscriber::unwatch(const std::string& waiter_id) noexcept {
  try {
    const auto found = waiters_.find(waiter_id);
    if (found == waiters_.end()) return;
    const std::string channel = found->second->channel;
    waiters_.erase(found);
    auto entry = channels_.find(channel);
    if (entry == channels_.end()) return;
    Channel& state = entry->second;
    if (--state.waiters > 0) return;
    if (state.outstanding > 0) return;  // its confirmation decides (on_push)
    if (state.subscribed && connection_->connected()) {
      state.idle_since = Clock::now();  // lingers, then maintain() drops it
      schedule_maintenance(channel_rules::linger_end(state.idle_since));
    } else if (state.denied) {
      schedule_maintenance(channel_rules::retry_at(state.denied_at, state.moved));  // remembered until then
    } else {
      channels_.erase(entry);
    }
  } catch (...) {
  }
}

void AsyncSubscriber::send(std::string_view verb, const std::string& channel) {
  std::string resp;
  const std::array<std::string_view, 2> args{verb, channel};
  append_resp(resp, args);
  channels_[channel].outstanding += 1;
  pending_.push_back({verb == "SUBSCRIBE" || verb == "SSUBSCRIBE", channel});
  connection_->send_unowed(resp);
}

void AsyncSubscriber::wake_channel_waiters(const std::string& channel, bool nudge) noexcept {
  for (auto& [id, slot] : waiters_)
    if (slot->channel == channel) {
      if (nudge) slot->nudged = true;
      slot->wake();
    }
}

void AsyncSubscriber::on_push(ReplyPtr reply) {
  if (reply->type == REDIS_REPLY_ERROR) {
    // A refused SUBSCRIBE (-NOPERM): its waiters poll.
    if (pending_.empty()) return;
    const Pending command = pending_.front();
    pending_.pop_front();
    const std::string& channel = command.channel;
    auto entry = channels_.find(channel);
    if (entry == channels_.end()) return;
    if (entry->second.outstanding > 0) entry->second.outstanding -= 1;
    if (!command.subscribe) {
      // The server no longer has it either way (e.g. its slot moved).
      entry->second.subscribed = false;
      if (entry->second.waiters == 0 && entry->second.outstanding == 0) channels_.erase(entry);
      return;
    }
    entry->second.denied = true;
    entry->second.denied_at = Clock::now();
    const std::string_view text(reply->str, reply->len);
    entry->second.moved = sharded_ && channel_rules::slot_elsewhere(text.substr(0, text.find(' ')));
    schedule_maintenance(channel_rules::retry_at(entry->second.denied_at, entry->second.moved));
    if (entry->second.moved) {
      // The channel's slot is not (or no longer) this master's: its
      // waiters retry now and follow the slot.
      wake_channel_waiters(channel, true);
      return;
    }
    warn_once("acl:subscribe:" + connection_->endpoint(),
              "lockon's async client may not SUBSCRIBE to its wake-up channels on " + connection_->endpoint() +
                  ": waiting locks fall back to polling every wait_poll_interval");
    wake_channel_waiters(channel);
    return;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 || reply->element[0]->type != REDIS_REPLY_STRING ||
      reply->element[1]->type != REDIS_REPLY_STRING)
    return;
  std::string_view kind(reply->element[0]->str, reply->element[0]->len);
  const std::string channel(reply->element[1]->str, reply->element[1]->len);
  // Shard channels answer with the same shapes, prefixed "s".
  if (sharded_ && (kind == "smessage" || kind == "ssubscribe" || kind == "sunsubscribe")) kind.remove_prefix(1);
  if (sharded_ && kind == "unsubscribe" && (pending_.empty() || pending_.front().channel != channel)) {
    // Not asked for: the channel's slot left this node (resharding,
    // failover). Its waiters retry now and follow the slot; the channel is
    // asked for again after kMovedRetry (the slot may come back, or the map
    // was stale), as the blocking Subscriber's slot_moved.
    auto entry = channels_.find(channel);
    if (entry == channels_.end()) return;
    entry->second.subscribed = false;
    if (entry->second.waiters == 0 && entry->second.outstanding == 0) {
      channels_.erase(entry);
      return;
    }
    entry->second.denied = true;
    entry->second.moved = true;
    entry->second.denied_at = Clock::now();
    schedule_maintenance(channel_rules::retry_at(entry->second.denied_at, true));
    wake_channel_waiters(channel, true);
    return;
  }
  if (kind == "message" && reply->element[2]->type == REDIS_REPLY_STRING) {
    // "<waiter id> <fence>"
    const std::string_view payload(reply->element[2]->str, reply->element[2]->len);
    const auto space = payload.find(' ');
    if (space == std::string_view::npos) return;
    const auto waiter = waiters_.find(std::string(payload.substr(0, space)));
    if (waiter == waiters_.end()) return;  // gave up meanwhile: its cancel passes the key on
    std::uint64_t fence = 0;
    const auto digits = payload.substr(space + 1);
    std::from_chars(digits.data(), digits.data() + digits.size(), fence);
    const auto entry = channels_.find(channel);
    waiter->second->handed = true;
    waiter->second->fence = fence;
    waiter->second->handed_generation = entry == channels_.end() ? 0 : subscription_generation(entry->second);
    waiter->second->wake();
    return;
  }
  if (kind != "subscribe" && kind != "unsubscribe") return;
  if (!pending_.empty()) pending_.pop_front();
  auto entry = channels_.find(channel);
  if (entry == channels_.end()) return;
  Channel& state = entry->second;
  if (state.outstanding > 0) state.outstanding -= 1;
  if (state.outstanding > 0) return;  // a later (UN)SUBSCRIBE decides
  state.subscribed = kind == "subscribe";
  if (state.subscribed) {
    ++state.epoch;
    state.denied = false;  // an earlier refusal of the same channel is over
    state.moved = false;
  }
  if (state.waiters == 0) {
    if (state.subscribed && connection_->connected()) {
      state.idle_since = Clock::now();  // its waiters left while it was asked for: it lingers
      schedule_maintenance(channel_rules::linger_end(state.idle_since));
    } else {
      channels_.erase(entry);
    }
    return;
  }
  if (!state.subscribed) {
    send(verb(true), channel);  // waiters came back while it was being dropped
    return;
  }
  wake_channel_waiters(channel);
}

void AsyncSubscriber::on_state(bool up) {
  ++generation_;
  if (up) {
    for (auto& [name, channel] : channels_)
      if (channel.waiters > 0) send(verb(true), name);
    return;
  }
  pending_.clear();
  for (auto entry = channels_.begin(); entry != channels_.end();) {
    entry->second.subscribed = false;
    entry->second.outstanding = 0;
    entry->second.denied = false;
    if (entry->second.waiters == 0) entry = channels_.erase(entry);
    else ++entry;
  }
  // Waiters retry at once (and poll) until their subscription is back.
  for (auto& [id, slot] : waiters_) {
    slot->nudged = true;
    slot->wake();
  }
  if (!channels_.empty()) schedule_reconnect();
}

void AsyncSubscriber::schedule_maintenance(Clock::time_point at) {
  if (closed_ || at >= maintenance_at_) return;  // an earlier look is due anyway
  maintenance_at_ = at;
  maintenance_timer_.expires_at(at);  // cancels a later wait: its handler sees a newer time
  std::weak_ptr<AsyncSubscriber> weak = weak_from_this();
  maintenance_timer_.async_wait([weak, at](const asio::error_code&) {
    auto self = weak.lock();
    if (!self || self->maintenance_at_ != at) return;  // rescheduled (or closed) since
    self->maintenance_at_ = Clock::time_point::max();
    self->maintain();
  });
}

void AsyncSubscriber::maintain() noexcept {
  try {
    if (closed_) return;
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto entry = channels_.begin(); entry != channels_.end();) {
      Channel& state = entry->second;
      if (state.denied) {
        const auto retry = channel_rules::retry_at(state.denied_at, state.moved);
        if (now < retry) {
          next = std::min(next, retry);
        } else if (state.waiters == 0) {
          entry = channels_.erase(entry);
          continue;
        } else if (connection_->connected() && state.outstanding == 0) {
          state.denied = false;  // ask again: rights may have been granted, the slot may be back
          state.moved = false;
          send(verb(true), entry->first);
        }
      } else if (state.waiters == 0 && state.subscribed && state.outstanding == 0 && connection_->connected()) {
        const auto end = channel_rules::linger_end(state.idle_since);
        if (now >= end) send(verb(false), entry->first);
        else next = std::min(next, end);
      }
      ++entry;
    }
    if (next != Clock::time_point::max()) schedule_maintenance(next);
  } catch (...) {
    // No memory for a command: the channel stays as it is until the next look.
  }
}

void AsyncSubscriber::schedule_reconnect() {
  if (reconnect_scheduled_ || closed_) return;
  reconnect_scheduled_ = true;
  reconnect_timer_.expires_after(reconnect_delay_);
  std::weak_ptr<AsyncSubscriber> weak = weak_from_this();
  reconnect_timer_.async_wait([weak](const asio::error_code&) {
    auto self = weak.lock();
    if (!self) return;
    self->reconnect_scheduled_ = false;
    if (self->closed_ || self->channels_.empty()) return;
    self->connection_->ensure_connected();
  });
}

asio::awaitable<bool> AsyncSubscriber::wait_subscribed(Watch& watch, Clock::time_point until) {
  auto self = shared_from_this();
  Slot& slot = watch.slot();
  while (true) {
    const auto entry = channels_.find(slot.channel);
    if (entry == channels_.end()) co_return false;
    if (entry->second.subscribed && entry->second.outstanding == 0) co_return true;
    if (entry->second.denied || closed_ || slot.handed || Clock::now() >= until) co_return false;
    slot.timer.expires_at(until);
    slot.waiting = true;
    co_await slot.timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    slot.waiting = false;
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) co_return false;
  }
}

asio::awaitable<AsyncSubscriber::Wake> AsyncSubscriber::wait_until(Watch& watch, Clock::time_point until) {
  auto self = shared_from_this();
  Slot& slot = watch.slot();
  // Woken for someone else's reason (a subscription confirmed): sleep on.
  while (!slot.handed && !slot.nudged && Clock::now() < until) {
    slot.timer.expires_at(until);
    slot.waiting = true;
    auto [ec] = co_await slot.timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    slot.waiting = false;
    static_cast<void>(ec);
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none) break;
  }
  if (slot.handed) co_return Wake::handed;
  if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
    co_return Wake::cancelled;
  if (slot.nudged) {
    slot.nudged = false;
    co_return Wake::nudged;
  }
  co_return Wake::timeout;
}

}  // namespace lockon::detail
