#include "support/black_hole_listener.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace lockon::test {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A non-blocking connect to the port; returns the socket (in progress or
// connected) or -1.
int start_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in address = loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether a connect to the port completes within `ms`.
bool connects_within(int port, int ms) {
  const int fd = start_connect(port);
  if (fd < 0) return true;  // refused at once: not a black hole either
  pollfd ready{fd, POLLOUT, 0};
  const int n = ::poll(&ready, 1, ms);
  ::close(fd);
  return n != 0;
}

}  // namespace

BlackHoleListener::BlackHoleListener() {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0) throw std::runtime_error(std::string("black hole: socket: ") + std::strerror(errno));
  sockaddr_in address = loopback(0);
  socklen_t length = sizeof address;
  if (::bind(listener_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || ::listen(listener_, 0) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int saved = errno;
    ::close(listener_);
    throw std::runtime_error(std::string("black hole: bind/listen: ") + std::strerror(saved));
  }
  port_ = ntohs(address.sin_port);
  // Backlog 0 still queues one connection (and one more may be half-open):
  // a few fillers, never accepted, fill the queue for good. Bounded: at
  // most 8 fillers, each checked with a short wait.
  for (int i = 0; i < 8; ++i) {
    const int filler = start_connect(port_);
    if (filler >= 0) fillers_.push_back(filler);
    if (i >= 1 && !connects_within(port_, 100)) return;
  }
  for (const int fd : fillers_) ::close(fd);
  ::close(listener_);
  throw std::runtime_error("black hole: port " + std::to_string(port_) + " kept accepting connections");
}

BlackHoleListener::~BlackHoleListener() {
  for (const int fd : fillers_) ::close(fd);
  if (listener_ >= 0) ::close(listener_);
}

std::string BlackHoleListener::url() const { return "redis://" + endpoint(); }
std::string BlackHoleListener::endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

}  // namespace lockon::test
