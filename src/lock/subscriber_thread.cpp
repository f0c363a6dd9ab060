// Subscriber's connection thread: subscribes while anyone waits, reads the
// wake-up messages for the waiters (unless the lone waiter reads directly),
// reconnects, and reports refused subscriptions. The waiters' side is in
// subscriber.cpp.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/diagnostics.hpp"
#include "common/token.hpp"
#include "protocol/lock_scripts.hpp"
#include "lock/subscriber.hpp"
#include "lock/subscriber_internal.hpp"

namespace lockon::detail {
namespace {

using namespace subscriber_internal;

std::string_view element_text(const redisReply& reply, std::size_t i) {
  if (i >= reply.elements) return {};
  const redisReply* e = reply.element[i];
  if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS) return {};
  return {e->str, e->len};
}

void nudge(Subscriber::Slot& slot) noexcept {
  {
    std::lock_guard lock(slot.mutex);
    slot.nudged = true;
  }
  slot.cv.notify_one();
}

}  // namespace

using namespace subscriber_internal;

void Subscriber::run() {
  while (true) {
    bool wanted = false;
    bool connected = false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      wanted = !waiters_.empty();
      connected = connected_;
    }
    int timeout_ms = kIdlePollMs;
    if (!connected && wanted) {
      connected = connect();
      if (!connected) timeout_ms = kReconnectDelayMs;
    }
    if (connected) timeout_ms = std::min(timeout_ms, sync_subscription());

    int fd = -1;
    std::uint64_t generation = 0;
    {
      std::lock_guard lock(mutex_);
      thread_reads_ = connected_ && !lone_waiter_subscribed();
      if (thread_reads_) {
        fd = connection_fd_;
        generation = generation_;
      }
    }
    std::array<pollfd, 2> fds{};
    fds[0] = {event_fd_, POLLIN, 0};
    fds[1] = {fd, POLLIN, 0};
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) continue;
    if (fds[0].revents & POLLIN) drain_fd(event_fd_);
    if (fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) read_available(generation, false);
  }
  std::lock_guard io(io_mutex_);
  drop_connection();
}

bool Subscriber::connect() {
  std::lock_guard io(io_mutex_);
  try {
    connection_.mark_broken();  // always a fresh socket
    connection_.ensure_connected();
    connection_.complete_handshake();  // replies are read raw from here on
  } catch (...) {
    return false;
  }
  std::lock_guard lock(mutex_);
  connected_ = true;
  for (auto& [name, channel] : channels_) channel.state = SubState::none;
  pending_.clear();
  connection_fd_ = connection_.fd();
  ++generation_;
  return true;
}

// Subscribes while anyone waits, unsubscribes when nobody does. Only this
// thread writes to the connection.
// Returns how long the caller may sleep before the linger ends.
int Subscriber::sync_subscription() {
  std::vector<Pending> commands;
  int sleep_ms = kIdlePollMs;
  {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& channel = it->second;
      const auto retry_at = channel_rules::retry_at(channel.denied_at, channel.moved);
      if (channel.state == SubState::denied && channel.moved && channel.waiters > 0 && now < retry_at) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(retry_at - now).count();
        sleep_ms = std::min(sleep_ms, static_cast<int>(left) + 1);
      }
      if (channel.state == SubState::denied && now >= retry_at) {
        if (channel.waiters == 0) {
          it = channels_.erase(it);
          continue;
        }
        channel.state = SubState::none;  // ask again
        channel.moved = false;
      }
      if (channel.waiters > 0 && channel.state == SubState::none) {
        channel.state = SubState::subscribing;
        commands.push_back({true, it->first});
      } else if (channel.waiters == 0 && channel.state == SubState::subscribed) {
        const auto linger_end = channel_rules::linger_end(channel.idle_since);
        if (now >= linger_end) {
          channel.state = SubState::unsubscribing;
          commands.push_back({false, it->first});
        } else {
          const auto left = std::chrono::ceil<std::chrono::milliseconds>(linger_end - now).count();
          sleep_ms = std::min(sleep_ms, static_cast<int>(left));
        }
      } else if (channel.waiters == 0 && channel.state == SubState::none) {
        it = channels_.erase(it);
        continue;
      }
      ++it;
    }
  }
  if (commands.empty()) return sleep_ms;
  std::lock_guard io(io_mutex_);
  try {
    // One channel per command: every command gets exactly one reply (a
    // confirmation or an error), so pending_ pairs them up.
    for (const Pending& command : commands) {
      const std::string_view verb = sharded_ ? (command.subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                                             : (command.subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
      const std::array<std::string_view, 2> args{verb, command.channel};
      connection_.append(args);
    }
    {
      std::lock_guard lock(mutex_);
      for (Pending& command : commands) pending_.push_back(std::move(command));
    }
    connection_.flush("SUBSCRIBE");
  } catch (...) {
    drop_connection();
  }
  return sleep_ms;
}

void Subscriber::read_available(std::uint64_t generation, bool direct) noexcept {
  const auto current = [&] {
    std::lock_guard lock(mutex_);
    return connected_ && generation_ == generation;
  };
  if (!current()) return;  // a stale reader must not wait for a reconnect
  std::lock_guard io(io_mutex_);
  if (!current()) return;
  // Never blocks: another reader may have taken the bytes first, which
  // costs nothing but a look.
  if (!connection_.pump_input()) {
    drop_connection();  // EOF or error
    return;
  }
  while (true) {
    ReplyPtr reply;
    if (!connection_.take_buffered_reply(reply)) {
      drop_connection();
      return;
    }
    if (!reply) return;
    on_message(*reply, direct);
  }
}

void Subscriber::on_message(const redisReply& reply, bool direct) {
  if (reply.type == REDIS_REPLY_ERROR) {
    Warning warning;
    {
      std::lock_guard lock(mutex_);
      warning = on_error_reply({reply.str, reply.len}, direct);
    }
    // Outside the mutex: a slow warning handler delays no waiter.
    if (!warning.topic.empty()) warn_once(warning.topic, warning.message);
    return;
  }
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 3) return;
  std::string_view kind = element_text(reply, 0);
  // Shard channels (sharded_) answer with the same shapes, prefixed "s".
  if (kind == "smessage" || kind == "ssubscribe" || kind == "sunsubscribe") kind.remove_prefix(1);
  std::lock_guard lock(mutex_);
  if (kind == "unsubscribe" && sharded_) {
    // Not ours to pop unless we asked: a server-sent sunsubscribe means the
    // channel's slot left this node.
    const std::string_view channel = element_text(reply, 1);
    const bool asked = !pending_.empty() && !pending_.front().subscribe && pending_.front().channel == channel;
    const auto it = channels_.find(std::string(channel));
    if (!asked) {
      if (it != channels_.end() && it->second.state == SubState::subscribed) slot_moved(it->second, it->first, direct);
      return;
    }
  }
  if ((kind == "subscribe" || kind == "unsubscribe") && !pending_.empty()) pending_.pop_front();
  if (kind == "message") {
    // Payload: "<waiter id> <fence>".
    const std::string_view payload = element_text(reply, 2);
    const auto space = payload.find(' ');
    const std::string id(payload.substr(0, space));
    std::uint64_t fence = 0;
    if (space != std::string_view::npos) {
      const std::string_view digits = payload.substr(space + 1);
      std::from_chars(digits.data(), digits.data() + digits.size(), fence);
    }
    const auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    const auto channel = channels_.find(std::string(element_text(reply, 1)));
    Slot& slot = *it->second.slot;
    {
      std::lock_guard slot_lock(slot.mutex);
      slot.handed = true;
      slot.fence = fence;
      // Read under io_mutex_ from the live connection: generation_ names
      // it, the channel's epoch the subscription it came through.
      slot.handed_generation = channel == channels_.end() ? 0 : subscription_generation(channel->second);
    }
    slot.cv.notify_one();
    // Its owner polls the socket, not the condition variable.
    if (!direct && &slot == direct_reader_) poke_reader();
  } else if (kind == "subscribe") {
    const auto it = channels_.find(std::string(element_text(reply, 1)));
    if (it != channels_.end() && it->second.state == SubState::subscribing) {
      it->second.state = SubState::subscribed;
      ++it->second.epoch;
    }
    confirmed_.notify_all();
    // A lone waiter that began sleeping before its channel was confirmed
    // (after a reconnect, or a slow confirmation) reads directly from now
    // on: this thread stops reading for it.
    if (direct_reader_ == nullptr && lone_waiter_subscribed()) ask_to_reevaluate(*waiters_.begin()->second.slot);
  } else if (kind == "unsubscribe") {
    const auto it = channels_.find(std::string(element_text(reply, 1)));
    if (it == channels_.end()) return;
    it->second.state = SubState::none;
    if (it->second.waiters > 0) poke();  // someone came back meanwhile: resubscribe
    else channels_.erase(it);
  }
}

Subscriber::Warning Subscriber::on_error_reply(std::string_view text, bool direct) {
  if (pending_.empty()) return {};
  const Pending command = std::move(pending_.front());
  pending_.pop_front();
  const auto it = channels_.find(command.channel);
  if (it == channels_.end()) return {};
  if (!command.subscribe) {
    // The server no longer has it either way (e.g. its slot moved).
    if (it->second.state == SubState::unsubscribing) it->second.state = SubState::none;
    return {};
  }
  const std::string_view error_code = text.substr(0, text.find(' '));
  if (sharded_ && channel_rules::slot_elsewhere(error_code)) {
    slot_moved(it->second, it->first, direct);
    return {};
  }
  it->second.state = SubState::denied;
  it->second.denied_at = Clock::now();
  confirmed_.notify_all();  // its waiters stop waiting for a confirmation
  const std::string& endpoint = connection_.endpoint();
  // "{K}:wake:<subscriber id>" → "{K}:wake:*": the rule an operator grants.
  const std::string pattern = command.channel.substr(0, command.channel.rfind(':') + 1) + "*";
  const std::string_view code = text.substr(0, text.find(' '));
  const std::string user = connection_.options().user.empty() ? "default" : connection_.options().user;
  if (code == "NOPERM")
    return {"acl:subscribe " + endpoint,
            "ACL user '" + user + "' lacks channel permission for '" + pattern + "' on " + endpoint +
                ": lock waiters fall back to polling every wait_poll_interval; grant '&*', or resetchannels + "
                "'&<lock key prefix>*'"};
  return {"subscribe " + endpoint, "SUBSCRIBE to '" + pattern + "' on " + endpoint + " was refused (" +
                                       std::string(code) +
                                       "): lock waiters fall back to polling every wait_poll_interval"};
}

void Subscriber::slot_moved(Channel& channel, const std::string& name, bool direct) {
  channel.state = SubState::denied;
  channel.moved = true;
  channel.denied_at = Clock::now();
  confirmed_.notify_all();  // its waiters stop waiting for a confirmation
  bool reader_nudged = false;
  for (auto& [id, waiter] : waiters_) {
    if (waiter.channel != name) continue;
    nudge(*waiter.slot);
    reader_nudged = reader_nudged || waiter.slot.get() == direct_reader_;
  }
  // Its owner polls the socket, not the condition variable. The thread may
  // read this while the lone waiter holds the socket (the thread decides who
  // reads once per loop), and then the next bytes there are the answer to
  // the retry, channel_rules::kMovedRetry later at best. Dispatch pokes alike.
  if (reader_nudged && !direct) poke_reader();
  poke();  // the thread schedules the retry
}

void Subscriber::drop_connection() noexcept {
  connection_.mark_broken();
  {
    std::lock_guard lock(mutex_);
    connected_ = false;
    for (auto& [name, channel] : channels_) channel.state = SubState::none;
    pending_.clear();
    connection_fd_ = -1;
    ++generation_;
    // Nobody may sleep on a message that can no longer arrive.
    for (auto& [id, waiter] : waiters_) nudge(*waiter.slot);
    confirmed_.notify_all();
  }
  poke_reader();
  poke();  // reconnect (a no-op wake when the thread itself dropped it)
}

}  // namespace lockon::detail
