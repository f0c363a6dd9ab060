#include "subscriber.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string_view>
#include <system_error>

namespace lockon::detail {
namespace {

constexpr std::chrono::milliseconds kReconnectDelay{100};
constexpr int kIdlePollMs = 1000;

std::string_view element_text(const redisReply& reply, std::size_t i) {
  if (i >= reply.elements) return {};
  const redisReply* e = reply.element[i];
  if (e->type != REDIS_REPLY_STRING && e->type != REDIS_REPLY_STATUS) return {};
  return {e->str, e->len};
}

void wake(Subscriber::Slot& slot) noexcept {
  {
    std::lock_guard lock(slot.mutex);
    slot.woken = true;
  }
  slot.cv.notify_one();
}

}  // namespace

bool Subscriber::Slot::wait_until(Clock::time_point until) {
  std::unique_lock lock(mutex);
  cv.wait_until(lock, until, [this] { return woken; });
  const bool was_woken = woken;
  woken = false;
  return was_woken;
}

Subscriber::Watch::Watch(Watch&& other) noexcept
    : owner_(other.owner_), channel_(std::move(other.channel_)), id_(std::move(other.id_)),
      slot_(std::move(other.slot_)) {
  other.owner_ = nullptr;
}

Subscriber::Watch::~Watch() {
  if (owner_ != nullptr) owner_->unwatch(channel_, id_);
}

bool Subscriber::Watch::wait_subscribed(Clock::time_point until) const {
  std::unique_lock lock(owner_->mutex_);
  return owner_->confirmed_.wait_until(lock, until, [this] {
    const auto it = owner_->channels_.find(channel_);
    return owner_->stopping_ || (it != owner_->channels_.end() && it->second.state == SubState::subscribed);
  });
}

Subscriber::Subscriber(ConnectionOptions options) : options_(options), connection_(std::move(options)) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for the lock subscriber");
  thread_ = std::thread([this] { run(); });
}

Subscriber::~Subscriber() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  poke();
  confirmed_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::close(event_fd_);
}

Subscriber::Watch Subscriber::watch(const std::string& channel, const std::string& id) {
  auto slot = std::make_shared<Slot>();
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    Channel& entry = channels_[channel];
    first = entry.refs++ == 0;
    entry.waiters[id] = slot;
  }
  if (first) poke();
  return Watch(this, channel, id, std::move(slot));
}

void Subscriber::unwatch(const std::string& channel, const std::string& id) noexcept {
  bool last = false;
  {
    std::lock_guard lock(mutex_);
    const auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    it->second.waiters.erase(id);
    last = --it->second.refs == 0;
  }
  if (last) poke();
}

std::size_t Subscriber::channel_count() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& [name, channel] : channels_)
    if (channel.state == SubState::subscribing || channel.state == SubState::subscribed) ++n;
  return n;
}

void Subscriber::poke() noexcept {
  const std::uint64_t one = 1;
  // A full counter still wakes the thread; nothing to handle.
  [[maybe_unused]] const auto written = ::write(event_fd_, &one, sizeof one);
}

void Subscriber::run() {
  while (true) {
    bool wanted = false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      for (const auto& [name, channel] : channels_) wanted = wanted || channel.refs > 0;
    }
    int timeout_ms = kIdlePollMs;
    if (!connected_ && wanted && !connect_and_resubscribe()) timeout_ms = static_cast<int>(kReconnectDelay.count());
    if (connected_) send_pending();

    std::array<pollfd, 2> fds{};
    fds[0] = {event_fd_, POLLIN, 0};
    fds[1] = {connected_ ? connection_.fd() : -1, POLLIN, 0};
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) continue;
    if (fds[0].revents & POLLIN) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto got = ::read(event_fd_, &value, sizeof value);
    }
    if (connected_ && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) read_messages();
  }
  drop_connection();
}

bool Subscriber::connect_and_resubscribe() {
  try {
    connection_.mark_broken();  // force a fresh socket
    connection_.ensure_connected();
  } catch (...) {
    return false;
  }
  std::lock_guard lock(mutex_);
  connected_ = true;
  std::erase_if(channels_, [](const auto& item) { return item.second.refs == 0; });
  for (auto& [name, channel] : channels_) channel.state = SubState::none;
  return true;
}

void Subscriber::send_pending() {
  bool wrote = false;
  {
    std::lock_guard lock(mutex_);
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& channel = it->second;
      if (channel.refs > 0 && channel.state == SubState::none) {
        const std::array<std::string_view, 2> args{"SUBSCRIBE", it->first};
        connection_.append(args);
        channel.state = SubState::subscribing;
        wrote = true;
      } else if (channel.refs == 0 && channel.state == SubState::subscribed) {
        const std::array<std::string_view, 2> args{"UNSUBSCRIBE", it->first};
        connection_.append(args);
        channel.state = SubState::unsubscribing;
        wrote = true;
      } else if (channel.refs == 0 && channel.state == SubState::none) {
        it = channels_.erase(it);
        continue;
      }
      ++it;
    }
  }
  if (!wrote) return;
  try {
    connection_.flush("SUBSCRIBE");
  } catch (...) {
    drop_connection();
  }
}

void Subscriber::read_messages() {
  redisContext* context = connection_.raw();
  if (redisBufferRead(context) != REDIS_OK) {
    drop_connection();
    return;
  }
  while (true) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context, &raw) != REDIS_OK) {
      drop_connection();
      return;
    }
    if (raw == nullptr) return;
    ReplyPtr reply(static_cast<redisReply*>(raw));
    on_message(*reply);
  }
}

void Subscriber::on_message(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 3) return;
  const std::string_view kind = element_text(reply, 0);
  const std::string channel_name(element_text(reply, 1));
  std::lock_guard lock(mutex_);
  const auto it = channels_.find(channel_name);
  if (it == channels_.end()) return;
  Channel& channel = it->second;
  if (kind == "message") {
    const std::string payload(element_text(reply, 2));
    if (payload == "*") {
      for (auto& [id, slot] : channel.waiters) wake(*slot);
    } else if (const auto waiter = channel.waiters.find(payload); waiter != channel.waiters.end()) {
      wake(*waiter->second);
    }
  } else if (kind == "subscribe") {
    if (channel.state == SubState::subscribing) channel.state = SubState::subscribed;
    confirmed_.notify_all();
  } else if (kind == "unsubscribe") {
    if (channel.refs > 0) {
      channel.state = SubState::none;  // someone started waiting meanwhile
      poke();
    } else {
      channels_.erase(it);
    }
  }
}

void Subscriber::drop_connection() noexcept {
  connection_.mark_broken();
  std::lock_guard lock(mutex_);
  connected_ = false;
  for (auto& [name, channel] : channels_) channel.state = SubState::none;
  wake_all_locked();
  confirmed_.notify_all();
}

void Subscriber::wake_all_locked() noexcept {
  // Nobody may sleep on a notification that can no longer arrive: everyone
  // retries now and polls until the subscription is back.
  for (auto& [name, channel] : channels_)
    for (auto& [id, slot] : channel.waiters) wake(*slot);
}

}  // namespace lockon::detail
