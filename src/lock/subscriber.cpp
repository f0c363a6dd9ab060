#include "lock/subscriber.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/diagnostics.hpp"
#include "lock/lock_scripts.hpp"
#include "common/token.hpp"

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

void signal_fd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto got = ::read(fd, &value, sizeof value);
}

timespec timeout_until(std::chrono::steady_clock::time_point until) {
  const auto left = until - std::chrono::steady_clock::now();
  const auto ns = std::max<long long>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
  // Capped: the caller loops, and an hour is far beyond any wait interval.
  const long long capped = std::min<long long>(ns, 3'600'000'000'000LL);
  return {static_cast<time_t>(capped / 1'000'000'000), static_cast<long>(capped % 1'000'000'000)};
}

// Tells a waiter asleep on its condition variable to look again whether it
// may read directly (it became the process's lone waiter).
void ask_to_reevaluate(Subscriber::Slot& slot) noexcept {
  {
    std::lock_guard lock(slot.mutex);
    slot.reevaluate = true;
  }
  slot.cv.notify_one();
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
  cv.wait_until(lock, until, [this] { return nudged || handed || reevaluate; });
  if (handed) return Wake::handed;
  const bool was_nudged = nudged;
  nudged = false;
  return was_nudged ? Wake::nudged : Wake::timeout;
}

Subscriber::Watch::Watch(Watch&& other) noexcept
    : owner_(other.owner_), id_(std::move(other.id_)), channel_(std::move(other.channel_)), slot_(std::move(other.slot_)) {
  other.owner_ = nullptr;
}

Subscriber::Watch::~Watch() {
  if (owner_ != nullptr) owner_->unwatch(id_);
}

Subscriber::Slot::Wake Subscriber::Watch::wait_until(Clock::time_point until) {
  Slot& slot = *slot_;
  while (true) {
    {
      std::lock_guard lock(slot.mutex);
      slot.reevaluate = false;
      if (slot.handed) return Slot::Wake::handed;
      if (slot.nudged) {
        slot.nudged = false;
        return Slot::Wake::nudged;
      }
    }
    if (Clock::now() >= until) return Slot::Wake::timeout;
    int fd = -1;
    std::uint64_t generation = 0;
    if (owner_->become_reader(slot, fd, generation)) {
      owner_->read_directly(fd, generation, until);
      continue;
    }
    const Slot::Wake wake = slot.wait_until(until);
    if (wake != Slot::Wake::timeout) return wake;
    // A timeout here may be a request to re-evaluate: loop (the top checks
    // the clock).
  }
}

bool Subscriber::Watch::wait_subscribed(Clock::time_point until) const {
  std::unique_lock lock(owner_->mutex_);
  // A refused channel will not be confirmed: no point waiting for it.
  owner_->confirmed_.wait_until(lock, until, [this] {
    return owner_->stopping_ || owner_->subscribed(channel_) || owner_->denied(channel_);
  });
  return owner_->subscribed(channel_);
}

Subscriber::Subscriber(ConnectionOptions options, bool sharded, std::string id)
    : id_(id.empty() ? random_hex(8) : std::move(id)), sharded_(sharded), connection_(std::move(options)) {
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for the lock subscriber");
  reader_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (reader_fd_ < 0) {
    const int error = errno;
    ::close(event_fd_);
    throw std::system_error(error, std::generic_category(), "eventfd for the lock subscriber");
  }
  thread_ = std::thread([this] { run(); });
}

Subscriber::~Subscriber() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  poke();
  poke_reader();
  confirmed_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::close(event_fd_);
  ::close(reader_fd_);
}

Subscriber::Watch Subscriber::watch(const std::string& id, const std::string& channel) {
  auto slot = std::make_shared<Slot>();
  bool needs_thread = false;
  {
    std::lock_guard lock(mutex_);
    waiters_[id] = {slot, channel};
    Channel& entry = channels_[channel];
    ++entry.waiters;
    // Wake the thread when it must subscribe, when it must start reading
    // for several waiters, or when it must stop reading because a lone
    // waiter will read directly (two readers woken by every message would
    // compete for the cores). In a process that contends repeatedly none of
    // these holds: the channel lingers and the thread already left the
    // socket to the waiters.
    const bool live = subscribed(channel);
    const bool pending_or_denied = entry.state == SubState::subscribing || entry.state == SubState::denied;
    needs_thread = !(live || (connected_ && pending_or_denied)) ||
                   (waiters_.size() > 1 && !thread_reads_) || (waiters_.size() == 1 && live && thread_reads_);
  }
  if (needs_thread) poke();
  return Watch(this, id, channel, std::move(slot));
}

// The thread is not poked: it notices an idle channel on its own (its poll
// times out at least every kIdlePollMs) and unsubscribes after the linger;
// waking it here would put a context switch on every acquisition's path.
// When one waiter is left the thread stops reading for it, and that waiter
// may be asleep on its condition variable (it began waiting beside others),
// so it is told to re-evaluate and read directly.
void Subscriber::unwatch(const std::string& id) noexcept {
  std::shared_ptr<Slot> lone;
  {
    std::lock_guard lock(mutex_);
    const auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    const auto channel = channels_.find(it->second.channel);
    if (channel != channels_.end() && --channel->second.waiters == 0) channel->second.idle_since = Clock::now();
    waiters_.erase(it);
    if (waiters_.size() == 1 && direct_reader_ == nullptr) lone = waiters_.begin()->second.slot;
  }
  if (lone) ask_to_reevaluate(*lone);
}

bool Subscriber::subscribed(const std::string& channel) const {
  const auto it = channels_.find(channel);
  return connected_ && it != channels_.end() && it->second.state == SubState::subscribed;
}

bool Subscriber::denied(const std::string& channel) const {
  const auto it = channels_.find(channel);
  return it != channels_.end() && it->second.state == SubState::denied;
}

bool Subscriber::lone_waiter_subscribed() const {
  return waiters_.size() == 1 && subscribed(waiters_.begin()->second.channel);
}

void Subscriber::poke() noexcept { signal_fd(event_fd_); }

void Subscriber::poke_reader() noexcept { signal_fd(reader_fd_); }

// Only the process's single waiter, on a confirmed subscription: with more
// waiters the thread reads, so nobody's wake-up depends on another waiter's
// schedule.
bool Subscriber::become_reader(const Slot& slot, int& fd, std::uint64_t& generation) {
  std::lock_guard lock(mutex_);
  if (stopping_ || direct_reader_ != nullptr || !lone_waiter_subscribed()) return false;
  direct_reader_ = &slot;
  fd = connection_fd_;
  generation = generation_;
  return true;
}

void Subscriber::read_directly(int fd, std::uint64_t generation, Clock::time_point until) noexcept {
  std::array<pollfd, 2> fds{};
  fds[0] = {fd, POLLIN, 0};
  fds[1] = {reader_fd_, POLLIN, 0};
  const timespec timeout = timeout_until(until);
  if (::ppoll(fds.data(), fds.size(), &timeout, nullptr) > 0) {
    if (fds[1].revents & POLLIN) drain_fd(reader_fd_);
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) read_available(generation, true);
  }
  leave_reader();
}

void Subscriber::leave_reader() noexcept {
  std::lock_guard lock(mutex_);
  direct_reader_ = nullptr;
  // Others who joined meanwhile poked the thread (watch()): it reads for them.
}

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
      const auto retry = channel.moved ? std::chrono::duration_cast<Clock::duration>(kMovedRetry)
                                       : std::chrono::duration_cast<Clock::duration>(kDeniedRetry);
      if (channel.state == SubState::denied && channel.moved && channel.waiters > 0 && now - channel.denied_at < retry) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(retry - (now - channel.denied_at)).count();
        sleep_ms = std::min(sleep_ms, static_cast<int>(left) + 1);
      }
      if (channel.state == SubState::denied && now - channel.denied_at >= retry) {
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
        const auto idle = now - channel.idle_since;
        if (idle >= kLinger) {
          channel.state = SubState::unsubscribing;
          commands.push_back({false, it->first});
        } else {
          const auto left = std::chrono::ceil<std::chrono::milliseconds>(kLinger - idle).count();
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
      warning = on_error_reply({reply.str, reply.len});
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
      if (it != channels_.end() && it->second.state == SubState::subscribed) slot_moved(it->second, it->first);
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
    Slot& slot = *it->second.slot;
    {
      std::lock_guard slot_lock(slot.mutex);
      slot.handed = true;
      slot.fence = fence;
    }
    slot.cv.notify_one();
    // Its owner polls the socket, not the condition variable.
    if (!direct && &slot == direct_reader_) poke_reader();
  } else if (kind == "subscribe") {
    const auto it = channels_.find(std::string(element_text(reply, 1)));
    if (it != channels_.end() && it->second.state == SubState::subscribing) it->second.state = SubState::subscribed;
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

Subscriber::Warning Subscriber::on_error_reply(std::string_view text) {
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
  if (sharded_ && (error_code == "MOVED" || error_code == "ASK" || error_code == "CLUSTERDOWN" ||
                   error_code == "TRYAGAIN")) {
    slot_moved(it->second, it->first);
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

void Subscriber::slot_moved(Channel& channel, const std::string& name) {
  channel.state = SubState::denied;
  channel.moved = true;
  channel.denied_at = Clock::now();
  confirmed_.notify_all();  // its waiters stop waiting for a confirmation
  for (auto& [id, waiter] : waiters_)
    if (waiter.channel == name) nudge(*waiter.slot);
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
