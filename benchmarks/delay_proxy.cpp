#include "delay_proxy.hpp"

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
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace lockon::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Bytes read from one socket, due to be written to the other.
struct Chunk {
  Clock::time_point due;
  std::string bytes;
};

// One direction of a relayed connection.
struct Pipe {
  int from = -1;
  int to = -1;
  std::deque<Chunk> queue;
};

// A client connection and its connection to the target.
struct Link {
  Pipe up;    // client -> server
  Pipe down;  // server -> client
  bool closed = false;
  ~Link() {
    if (up.from >= 0) ::close(up.from);
    if (down.from >= 0) ::close(down.from);
  }
};

// Reads what is available; false on EOF or error.
bool pull(Pipe& pipe, std::chrono::microseconds delay) {
  char buffer[65536];
  const auto got = ::recv(pipe.from, buffer, sizeof buffer, MSG_DONTWAIT);
  if (got == 0) return false;
  if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  pipe.queue.push_back({Clock::now() + delay, std::string(buffer, static_cast<std::size_t>(got))});
  return true;
}

// Writes every chunk that is due; false on error.
bool push_due(Pipe& pipe, Clock::time_point now) {
  while (!pipe.queue.empty() && pipe.queue.front().due <= now) {
    const std::string& bytes = pipe.queue.front().bytes;
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const auto n = ::send(pipe.to, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      sent += static_cast<std::size_t>(n);
    }
    pipe.queue.pop_front();
  }
  return true;
}

int connect_to(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  no_delay(fd);
  return fd;
}

}  // namespace

DelayProxy::DelayProxy(std::chrono::microseconds one_way) : one_way_(one_way) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) fail("delay proxy: eventfd");
  thread_ = std::thread([this] { run(); });
}

DelayProxy::~DelayProxy() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
  for (const Route& route : routes_) ::close(route.listen_fd);
}

int DelayProxy::relay_to(const std::string& target_host, int target_port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("delay proxy: socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    fail("delay proxy: listen");
  }
  {
    std::lock_guard lock(mutex_);
    routes_.push_back({fd, target_host, target_port});
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof one);
  return ntohs(address.sin_port);
}

void DelayProxy::run() noexcept {
  // The default 50 us timer slack would add to every delay.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  std::vector<Route> routes;
  std::vector<std::unique_ptr<Link>> links;
  std::vector<pollfd> fds;
  while (true) {
    const auto now = Clock::now();
    auto next_due = Clock::time_point::max();
    for (auto& link : links) {
      for (Pipe* pipe : {&link->up, &link->down}) {
        if (!push_due(*pipe, now)) link->closed = true;
        if (!pipe->queue.empty()) next_due = std::min(next_due, pipe->queue.front().due);
      }
    }
    std::erase_if(links, [](const std::unique_ptr<Link>& link) { return link->closed; });

    // fds: wake, then one per route's listener, then two per link.
    fds.clear();
    const std::size_t polled_routes = routes.size();  // routes only grow
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const Route& route : routes) fds.push_back({route.listen_fd, POLLIN, 0});
    for (auto& link : links) {
      fds.push_back({link->up.from, POLLIN, 0});
      fds.push_back({link->down.from, POLLIN, 0});
    }
    timespec timeout{};
    timespec* timeout_ptr = nullptr;
    if (next_due != Clock::time_point::max()) {
      const auto wait = std::max(Clock::duration::zero(), next_due - Clock::now());
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      timeout.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      timeout.tv_nsec = static_cast<long>(ns % 1'000'000'000);
      timeout_ptr = &timeout;
    }
    if (::ppoll(fds.data(), fds.size(), timeout_ptr, nullptr) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto got = ::read(wake_fd_, &value, sizeof value);
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      routes = routes_;  // new routes join at the next round
    }
    const std::size_t first_link = 1 + polled_routes;
    for (std::size_t r = 0; r < polled_routes; ++r) {
      if (!(fds[1 + r].revents & POLLIN)) continue;
      const int client = ::accept4(routes[r].listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      no_delay(client);
      const int server = connect_to(routes[r].host, routes[r].port);
      if (server < 0) {
        ::close(client);
        continue;
      }
      auto link = std::make_unique<Link>();
      link->up = {client, server, {}};
      link->down = {server, client, {}};
      links.push_back(std::move(link));
    }
    // Only the links that were polled (new ones were appended after them).
    for (std::size_t i = first_link; i + 1 < fds.size(); i += 2) {
      Link& link = *links[(i - first_link) / 2];
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !pull(link.up, one_way_)) link.closed = true;
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) && !pull(link.down, one_way_)) link.closed = true;
    }
  }
}

}  // namespace lockon::bench
