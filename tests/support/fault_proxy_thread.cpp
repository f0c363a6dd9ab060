// support/fault_proxy_thread.cpp — the poll loop behind FaultProxy: one
// ppoll() over non-blocking sockets of every attached proxy. Timers (latency,
// delays) are due times in the links' queues; the loop sleeps until the
// earliest one or the next socket event, never spins.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "support/fault_proxy_internal.hpp"

namespace lockon::test {
namespace {

using namespace proxy_detail;

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int start_connect(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
      (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  no_delay(fd);
  return fd;
}

void close_with_reset(int fd) {
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  ::close(fd);
}

timespec* until(Clock::time_point due, timespec& storage) {
  if (due == Clock::time_point::max()) return nullptr;
  const auto wait = std::max(Clock::duration::zero(), due - Clock::now());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
  storage.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  storage.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return &storage;
}

}  // namespace

FaultProxy::Thread::Thread() {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::runtime_error(std::string("FaultProxy: eventfd: ") + std::strerror(errno));
  thread_ = std::thread([this] { run(); });
}

FaultProxy::Thread::~Thread() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
}

void FaultProxy::Thread::wake() const noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof one);
}

void FaultProxy::Thread::attach(FaultProxy& proxy) {
  {
    const std::lock_guard lock(mutex_);
    attached_.push_back(&proxy);
  }
  wake();
}

void FaultProxy::Thread::detach(FaultProxy& proxy) {
  std::unique_lock lock(mutex_);
  detaching_.push_back(&proxy);
  lock.unlock();
  wake();
  lock.lock();
  // The loop never blocks, so it answers at once; a dead loop serves nobody.
  detached_.wait(lock, [&] {
    return dead_ || std::find(attached_.begin(), attached_.end(), &proxy) == attached_.end();
  });
}

void FaultProxy::Thread::run() noexcept {
  // The default 50 us timer slack would add to every latency and delay.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  try {
    loop();
  } catch (...) {  // out of memory: the proxies die, their clients see EOF
  }
  links_.clear();
  for (FaultProxy* proxy : serving_) proxy->live_connections_.store(0);
  const std::lock_guard lock(mutex_);
  dead_ = true;
  detached_.notify_all();
  for (FaultProxy* proxy : attached_) {
    const std::lock_guard proxy_lock(proxy->mutex_);
    proxy->drops_done_ = proxy->drop_requests_;
    proxy->drops_cv_.notify_all();
  }
}

bool FaultProxy::Thread::handle_control() {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto got = ::read(wake_fd_, &value, sizeof value);
  const std::lock_guard lock(mutex_);
  if (stopping_) return false;
  for (FaultProxy* gone : detaching_) {
    std::erase_if(links_, [&](const std::unique_ptr<Link>& link) { return link->proxy == gone; });
    std::erase(attached_, gone);
  }
  if (!detaching_.empty()) detached_.notify_all();
  detaching_.clear();
  serving_ = attached_;
  for (FaultProxy* proxy : serving_) {
    const std::lock_guard proxy_lock(proxy->mutex_);
    if (proxy->drops_done_ < proxy->drop_requests_) {
      std::erase_if(links_, [&](const std::unique_ptr<Link>& link) { return link->proxy == proxy; });
      proxy->live_connections_.store(0);
      proxy->drops_done_ = proxy->drop_requests_;
      proxy->drops_cv_.notify_all();
    }
  }
  return true;
}

void FaultProxy::Thread::accept_clients(FaultProxy& proxy) {
  for (int i = 0; i < 64; ++i) {
    const int client = ::accept4(proxy.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) return;
    if (proxy.refuse_.load()) {
      close_with_reset(client);
      continue;
    }
    std::string host;
    int port = 0;
    {
      const std::lock_guard lock(proxy.mutex_);
      host = proxy.upstream_host_;
      port = proxy.upstream_port_;
    }
    const int server = start_connect(host, port);
    if (server < 0) {  // the upstream refuses: so does the proxy
      close_with_reset(client);
      continue;
    }
    no_delay(client);
    links_.push_back(std::make_unique<Link>(proxy, proxy.accepted_.fetch_add(1), client, server));
  }
}

void FaultProxy::Thread::loop() {
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = Clock::now();
    auto next_due = Clock::time_point::max();
    for (auto& owner : links_) {
      Link& link = *owner;
      if (!link.proxy->blackholed_.load()) {  // a partition holds every byte
        link.flush_up(now);
        link.pair_replies();
        link.flush_down(now);
        if (!link.connecting && !link.server_blocked && !link.up.empty()) {
          next_due = std::min(next_due, link.up.front().due);
        }
        if (!link.client_blocked && !link.down.empty()) next_due = std::min(next_due, link.down.front().due);
      }
      if (link.client_eof && link.up.empty()) link.closed = true;
    }
    std::erase_if(links_, [](const std::unique_ptr<Link>& link) { return link->closed; });
    for (FaultProxy* proxy : serving_) {
      proxy->live_connections_.store(static_cast<std::size_t>(std::count_if(
          links_.begin(), links_.end(), [&](const std::unique_ptr<Link>& link) { return link->proxy == proxy; })));
    }

    // fds: wake, a listener per proxy, then client and server of each link.
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (FaultProxy* proxy : serving_) fds.push_back({proxy->listen_fd_, POLLIN, 0});
    for (auto& owner : links_) {
      const Link& link = *owner;
      short client_events = 0;
      short server_events = 0;
      if (!link.closing && !link.client_eof && link.client_in.size() < kMaxMessage && link.up_bytes < kHighWater) {
        client_events |= POLLIN;
      }
      if (link.client_blocked) client_events |= POLLOUT;
      if (link.connecting || link.server_blocked) server_events |= POLLOUT;
      if (!link.connecting && !link.closing && link.down_bytes < kHighWater && link.server_in.size() < kMaxMessage) {
        server_events |= POLLIN;
      }
      // A socket with nothing wanted is left out: a hung-up peer would
      // otherwise report POLLHUP every round (a busy loop).
      fds.push_back({client_events != 0 ? link.client : -1, client_events, 0});
      fds.push_back({server_events != 0 ? link.server : -1, server_events, 0});
    }
    timespec storage{};
    if (::ppoll(fds.data(), fds.size(), until(next_due, storage), nullptr) < 0 && errno != EINTR) return;

    const std::size_t proxies = serving_.size();
    const std::size_t polled = links_.size();  // accept_clients appends
    for (std::size_t i = 0; i < polled; ++i) {
      Link& link = *links_[i];
      const short client_events = fds[1 + proxies + 2 * i].revents;
      const short server_events = fds[2 + proxies + 2 * i].revents;
      if (server_events != 0 && link.connecting) {
        int error = 0;
        socklen_t size = sizeof error;
        ::getsockopt(link.server, SOL_SOCKET, SO_ERROR, &error, &size);
        if (error != 0) {  // the upstream refuses: so does the proxy
          close_with_reset(link.client);
          link.client = -1;
          link.closed = true;
          continue;
        }
        link.connecting = false;
      } else if (server_events & POLLOUT) {
        link.server_blocked = false;
      }
      if (client_events & POLLOUT) link.client_blocked = false;
      if (client_events & (POLLIN | POLLHUP | POLLERR)) link.read_client();
      if (!link.connecting && !link.closed && (server_events & (POLLIN | POLLHUP | POLLERR))) link.read_server();
    }
    for (std::size_t p = 0; p < proxies; ++p) {
      if (fds[1 + p].revents & POLLIN) accept_clients(*serving_[p]);
    }
    if ((fds[0].revents & POLLIN) && !handle_control()) return;
  }
}

}  // namespace lockon::test
