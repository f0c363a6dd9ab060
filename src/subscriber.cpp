#include "subscriber.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <string_view>
#include <system_error>

#include "lock_scripts.hpp"
#include "token.hpp"

namespace lockon::detail {
namespace {

constexpr int kReconnectDelayMs = 100;
constexpr int kIdlePollMs = 1000;
constexpr auto kLinger = std::chrono::milliseconds(1000);

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

Subscriber::Slot::Wake Subscriber::Slot::wait_until(Clock::time_point until) {
  std::unique_lock lock(mutex);
  cv.wait_until(lock, until, [this] { return nudged || handed; });
  if (handed) return Wake::handed;
  const bool was_nudged = nudged;
  nudged = false;
  return was_nudged ? Wake::nudged : Wake::timeout;
}

Subscriber::Watch::Watch(Watch&& other) noexcept
    : owner_(other.owner_), id_(std::move(other.id_)), slot_(std::move(other.slot_)) {
  other.owner_ = nullptr;
}

Subscriber::Watch::~Watch() {
  if (owner_ != nullptr) owner_->unwatch(id_);
}

bool Subscriber::Watch::wait_subscribed(Clock::time_point until) const {
  std::unique_lock lock(owner_->mutex_);
  return owner_->confirmed_.wait_until(lock, until, [this] {
    return owner_->stopping_ || (owner_->state_ == SubState::subscribed &&
                                 owner_->subscribed_channel_ == wake_channel(owner_->id_));
  });
}

Subscriber::Subscriber(ConnectionOptions options) : id_(random_hex(8)), connection_(std::move(options)) {
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

Subscriber::Watch Subscriber::watch(const std::string& id) {
  auto slot = std::make_shared<Slot>();
  bool needs_thread = false;
  {
    std::lock_guard lock(mutex_);
    // Still subscribed (lingering, or others wait): nothing for the thread
    // to do, and waking it would cost the waiter a context switch.
    needs_thread = !(connected_ && (state_ == SubState::subscribed || state_ == SubState::subscribing));
    waiters_[id] = slot;
  }
  if (needs_thread) poke();
  return Watch(this, id, std::move(slot));
}

// No poke: the thread notices the idle subscription on its own (its poll
// times out at least every kIdlePollMs) and unsubscribes after the linger.
// Waking it here would put a context switch on every acquisition's path.
void Subscriber::unwatch(const std::string& id) noexcept {
  std::lock_guard lock(mutex_);
  waiters_.erase(id);
  if (waiters_.empty()) idle_since_ = Clock::now();
}

void Subscriber::poke() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(event_fd_, &one, sizeof one);
}

void Subscriber::run() {
  while (true) {
    bool wanted = false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      wanted = !waiters_.empty();
    }
    int timeout_ms = kIdlePollMs;
    if (!connected_ && wanted && !connect()) timeout_ms = kReconnectDelayMs;
    if (connected_) timeout_ms = std::min(timeout_ms, sync_subscription());

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

bool Subscriber::connect() {
  try {
    connection_.mark_broken();  // always a fresh socket
    connection_.ensure_connected();
  } catch (...) {
    return false;
  }
  std::lock_guard lock(mutex_);
  connected_ = true;
  state_ = SubState::none;
  return true;
}

// Subscribes while anyone waits, unsubscribes when nobody does. Only this
// thread writes to the connection.
// Returns how long the caller may sleep before the linger ends.
int Subscriber::sync_subscription() {
  std::string command;
  std::string channel;
  int sleep_ms = kIdlePollMs;
  {
    std::lock_guard lock(mutex_);
    const bool wanted = !waiters_.empty();
    if (wanted && state_ == SubState::none) {
      command = "SUBSCRIBE";
      channel = wake_channel(id_);
      subscribed_channel_ = channel;
      state_ = SubState::subscribing;
    } else if (!wanted && state_ == SubState::subscribed) {
      const auto idle = Clock::now() - idle_since_;
      if (idle >= kLinger) {
        command = "UNSUBSCRIBE";
        channel = subscribed_channel_;
        state_ = SubState::unsubscribing;
      } else {
        sleep_ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(kLinger - idle).count());
      }
    }
  }
  if (command.empty()) return sleep_ms;
  try {
    const std::array<std::string_view, 2> args{command, channel};
    connection_.append(args);
    connection_.flush(command);
  } catch (...) {
    drop_connection();
  }
  return sleep_ms;
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
  std::lock_guard lock(mutex_);
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
    Slot& slot = *it->second;
    {
      std::lock_guard slot_lock(slot.mutex);
      slot.handed = true;
      slot.fence = fence;
    }
    slot.cv.notify_one();
  } else if (kind == "subscribe") {
    if (state_ == SubState::subscribing) state_ = SubState::subscribed;
    confirmed_.notify_all();
  } else if (kind == "unsubscribe") {
    state_ = SubState::none;  // resubscribes at once if someone waits again
    if (!waiters_.empty()) poke();
  }
}

void Subscriber::drop_connection() noexcept {
  connection_.mark_broken();
  std::lock_guard lock(mutex_);
  connected_ = false;
  state_ = SubState::none;
  // Nobody may sleep on a message that can no longer arrive.
  for (auto& [id, slot] : waiters_) nudge(*slot);
  confirmed_.notify_all();
}

}  // namespace lockon::detail
