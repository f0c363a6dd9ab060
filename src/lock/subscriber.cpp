// Subscriber, the waiters' side: watching a channel, waiting for a wake-up
// (on the condition variable, or reading the socket directly as the
// process's lone waiter). The connection thread is in subscriber_thread.cpp.
#include "lock/subscriber.hpp"
#include "lock/subscriber_internal.hpp"

#include <poll.h>
#include <sched.h>
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
#include "protocol/lock_scripts.hpp"
#include "common/token.hpp"

namespace lockon::detail {
namespace {

using namespace subscriber_internal;

void signal_fd(int fd) noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(fd, &one, sizeof one);
}

timespec timeout_until(std::chrono::steady_clock::time_point until) {
  const auto left = until - std::chrono::steady_clock::now();
  const auto ns = std::max<long long>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
  // Capped: the caller loops, and an hour is far beyond any wait interval.
  const long long capped = std::min<long long>(ns, 3'600'000'000'000LL);
  return {static_cast<time_t>(capped / 1'000'000'000), static_cast<long>(capped % 1'000'000'000)};
}

}  // namespace

WaitSlot::Wake WaitSlot::wait_until(std::chrono::steady_clock::time_point until) {
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

Subscriber::Slot::Wake Subscriber::Watch::wait_until(Clock::time_point until, SpinWindow spin) {
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
    if (test_hooks::before_direct_read != nullptr) test_hooks::before_direct_read(slot);
    if (owner_->become_reader(slot, fd, generation)) {
      if (test_hooks::before_direct_poll != nullptr) test_hooks::before_direct_poll(slot);
      owner_->read_directly(fd, generation, until, spin);
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

std::uint64_t Subscriber::Watch::connection_generation() const {
  std::lock_guard lock(owner_->mutex_);
  if (!owner_->subscribed(channel_)) return 0;
  return owner_->subscription_generation(owner_->channels_.at(channel_));
}

std::chrono::nanoseconds Subscriber::Watch::handoff_interval() const {
  std::lock_guard lock(owner_->mutex_);
  const auto it = owner_->channels_.find(channel_);
  if (it == owner_->channels_.end() || it->second.handoff_samples < 2) return std::chrono::nanoseconds(0);
  return it->second.handoff_interval;
}

void Subscriber::Watch::note_handoff(std::chrono::nanoseconds waited, long long ahead) const {
  std::lock_guard lock(owner_->mutex_);
  const auto it = owner_->channels_.find(channel_);
  if (it == owner_->channels_.end() || ahead < 0 || waited.count() <= 0) return;
  it->second.handoff_interval = next_handoff_interval(it->second.handoff_interval, waited, ahead);
  if (it->second.handoff_samples < 2) ++it->second.handoff_samples;
}

Subscriber::Subscriber(ConnectionOptions options, bool sharded, std::string id)
    : id_(id.empty() ? new_subscriber_id() : std::move(id)), sharded_(sharded), connection_(std::move(options)) {
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
bool Subscriber::become_reader(Slot& slot, int& fd, std::uint64_t& generation) {
  std::lock_guard lock(mutex_);
  if (stopping_ || direct_reader_ != nullptr || !lone_waiter_subscribed()) return false;
  {
    // The thread may have dispatched our hand-over (or nudge) after our
    // caller last looked and before we hold mutex_: it then saw no direct
    // reader to poke, and the socket will stay silent. Dispatch holds
    // mutex_, so looking again here closes that window (lock order:
    // mutex_, then the slot's).
    std::lock_guard slot_lock(slot.mutex);
    if (slot.handed || slot.nudged) return false;  // the caller's wait returns at once
  }
  direct_reader_ = &slot;
  fd = connection_fd_;
  generation = generation_;
  return true;
}

// Sleeps in ppoll, except during `spin`: there it looks without sleeping
// and yields the CPU between looks, so a hand-over arriving then is seen
// without a wake-up (handoff_spin.hpp). Before the window it sleeps until
// the window opens (a message arriving first ends that sleep as usual).
void Subscriber::read_directly(int fd, std::uint64_t generation, Clock::time_point until, SpinWindow spin) noexcept {
  std::array<pollfd, 2> fds{};
  fds[0] = {fd, POLLIN, 0};
  fds[1] = {reader_fd_, POLLIN, 0};
  int ready = 0;
  const auto spin_end = std::min(spin.to, until);
  if (!spin.empty() && Clock::now() < spin_end && spin.from < spin_end) {
    if (Clock::now() < spin.from) {
      const timespec timeout = timeout_until(spin.from);
      ready = ::ppoll(fds.data(), fds.size(), &timeout, nullptr);
    }
    const timespec zero{0, 0};
    while (ready == 0 && Clock::now() < spin_end) {
      ::sched_yield();
      ready = ::ppoll(fds.data(), fds.size(), &zero, nullptr);
      if (ready > 0) test_hooks::seen_while_polling.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (ready == 0) {
    const timespec timeout = timeout_until(until);
    ready = ::ppoll(fds.data(), fds.size(), &timeout, nullptr);
  }
  if (ready > 0) {
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

Subscriber& subscriber_of(Node& node) {
  constexpr NodeServiceFactory make = [](const ConnectionOptions& options,
                                         const PubSubSettings& pubsub) -> std::unique_ptr<NodeService> {
    return std::make_unique<Subscriber>(options, pubsub.sharded, pubsub.subscriber_id);
  };
  // The only factory of Node services (topology.hpp's invariant).
  return static_cast<Subscriber&>(node.service(make));
}

}  // namespace lockon::detail
