// TCP and Unix-socket transports, the bounded connect, and the blocking
// front's wait. TLS lives in tls_transport.cpp.
#include "client/transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = Transport::Clock;

/// A plain socket (TCP or Unix): the kernel does all the work. The socket
/// itself is in blocking mode; read_some/write_some pass MSG_DONTWAIT, so
/// they never wait, and read_within can block in recv() itself.
class SocketTransport final : public Transport {
 public:
  SocketTransport(int fd, std::string_view kind) noexcept : fd_(fd), kind_(kind) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  }
  ~SocketTransport() override { ::close(fd_); }

  int fd() const noexcept override { return fd_; }

  IoStatus read_within(char* data, std::size_t size, std::chrono::milliseconds timeout) noexcept override {
    if (!set_receive_timeout(timeout)) return IoStatus{.error = errno};
    const auto started = std::chrono::steady_clock::now();
    while (true) {
      const ssize_t n = ::recv(fd_, data, size, 0);
      if (n > 0) return IoStatus{.bytes = static_cast<std::size_t>(n)};
      if (n == 0) return IoStatus{.closed = true};
      if (errno == EINTR) {
        // A recv with SO_RCVTIMEO is never restarted after a signal (even
        // SA_RESTART): go on with what is left of the timeout, not all of
        // it again, or a periodic signal (a profiler, setitimer) makes a
        // read on a silent server wait forever (found by review, session 18).
        if (timeout.count() == 0) continue;
        const auto spent =
            std::chrono::ceil<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
        if (spent >= timeout) return IoStatus{.want = Want::read};
        if (!set_receive_timeout(timeout - spent)) return IoStatus{.error = errno};
        continue;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus{.want = Want::read};
      return IoStatus{.error = errno};
    }
  }

  bool set_receive_timeout(std::chrono::milliseconds timeout) noexcept {
    if (timeout == receive_timeout_) return true;
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    if (::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) return false;
    receive_timeout_ = timeout;
    return true;
  }

  IoStatus read_some(char* data, std::size_t size) noexcept override { return receive(data, size, MSG_DONTWAIT); }

  IoStatus receive(char* data, std::size_t size, int flags) noexcept {
    while (true) {
      const ssize_t n = ::recv(fd_, data, size, flags);
      if (n > 0) return IoStatus{.bytes = static_cast<std::size_t>(n)};
      if (n == 0) return IoStatus{.closed = true};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus{.want = Want::read};
      return IoStatus{.error = errno};
    }
  }

  IoStatus write_some(const char* data, std::size_t size) noexcept override {
    while (true) {
      // MSG_NOSIGNAL: writing to a connection the peer reset (a killed
      // server) would otherwise raise SIGPIPE and kill the whole process.
      const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) return IoStatus{.bytes = static_cast<std::size_t>(n)};
      if (n == 0) return IoStatus{.error = EPIPE};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus{.want = Want::write};
      return IoStatus{.error = errno};
    }
  }

  std::string_view kind() const noexcept override { return kind_; }

 private:
  int fd_;
  std::string_view kind_;
  std::chrono::milliseconds receive_timeout_{0};  // SO_RCVTIMEO now set (0: none, the default)
};

int poll_timeout_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 1'000'000'000));
}

[[noreturn]] void connect_failed(std::string_view endpoint, const std::string& cause) {
  throw ConnectError("connect on " + std::string(endpoint) + ": " + cause);
}

// Waits for a non-blocking connect() to finish. Returns 0 or the error.
int finish_connect(int fd, Clock::time_point deadline) {
  while (true) {
    pollfd ready{fd, POLLOUT, 0};
    const int n = ::poll(&ready, 1, poll_timeout_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ETIMEDOUT;
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return errno;
    return error;
  }
}

void enable_keepalive(int fd) noexcept {
  // As hiredis' redisEnableKeepAlive: probe after 15 s idle, every 5 s, so
  // a silently dead peer is noticed in well under a minute.
  int on = 1;
  int idle = 15;
  int interval = 5;
  int count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

int connect_unix(const std::string& path, Clock::time_point deadline, std::string_view endpoint) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) connect_failed(endpoint, "cannot connect: unix socket path too long");
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) connect_failed(endpoint, std::string("cannot connect: ") + std::strerror(errno));
  int error = 0;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    error = errno;
    // A unix socket with a full accept queue says EAGAIN at once; a blocking
    // connect would wait for room. Wait for it, within the deadline.
    if (error == EAGAIN || error == EINPROGRESS) {
      while (error == EAGAIN && Clock::now() < deadline) {
        ::usleep(1000);
        error = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
        if (error == EISCONN) error = 0;
      }
      if (error == EINPROGRESS) error = finish_connect(fd, deadline);
      if (error == EAGAIN) error = ETIMEDOUT;
    }
  }
  if (error != 0) {
    ::close(fd);
    connect_failed(endpoint, error == ETIMEDOUT ? std::string("connect timed out")
                                                : std::string("cannot connect: ") + std::strerror(error));
  }
  return fd;
}

}  // namespace

int connect_tcp(const std::string& host, int port, bool keepalive, Clock::time_point deadline,
                std::string_view endpoint) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  // Name resolution cannot be bounded here (getaddrinfo blocks); numeric
  // hosts, the common case, resolve without I/O.
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0 || found == nullptr)
    connect_failed(endpoint, std::string("cannot connect: cannot resolve host: ") + ::gai_strerror(rc));
  int error = 0;
  int fd = -1;
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    fd = ::socket(candidate->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = errno;
      continue;
    }
    error = ::connect(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) error = finish_connect(fd, deadline);
    if (error == 0) break;
    ::close(fd);
    fd = -1;
    if (error == ETIMEDOUT) break;  // the deadline is spent; no time for the next address
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    connect_failed(endpoint, error == ETIMEDOUT ? std::string("connect timed out")
                                                : std::string("cannot connect: ") + std::strerror(error));
  }
  int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (keepalive) enable_keepalive(fd);
  return fd;
}

std::unique_ptr<Transport> open_transport(const ConnectionOptions& options, const std::string& host, int port,
                                          Clock::time_point deadline, std::string_view endpoint) {
  if (!options.unix_path.empty() && host.empty()) {
    if (options.tls.enabled) throw ConfigError("connect on " + std::string(endpoint) + ": TLS over a unix socket is not supported");
    return std::make_unique<SocketTransport>(connect_unix(options.unix_path, deadline, endpoint), "unix");
  }
  const int fd = connect_tcp(host, port, options.keepalive, deadline, endpoint);
  if (options.tls.enabled) return open_tls_transport(fd, options, host, deadline, endpoint);
  return std::make_unique<SocketTransport>(fd, "tcp");
}

std::unique_ptr<Transport> make_socket_transport(int fd, std::string_view kind) {
  return std::make_unique<SocketTransport>(fd, kind);
}

IoStatus Transport::read_within(char* data, std::size_t size, std::chrono::milliseconds timeout) noexcept {
  const Clock::time_point deadline = timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
  while (true) {
    IoStatus status = read_some(data, size);
    if (status.want == Want::nothing || status.bytes > 0) return status;
    if (!wait_ready(*this, status.want, deadline)) return status;
  }
}

bool wait_ready(const Transport& transport, Want want, Clock::time_point deadline) noexcept {
  if (want == Want::nothing) return true;
  if (want == Want::read && transport.has_buffered_input()) return true;
  return wait_fd_ready(transport.fd(), want, deadline);
}

bool wait_fd_ready(int fd, Want want, Clock::time_point deadline) noexcept {
  if (want == Want::nothing) return true;
  pollfd ready{fd, static_cast<short>(want == Want::read ? POLLIN : POLLOUT), 0};
  while (true) {
    const int n = ::poll(&ready, 1, poll_timeout_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    // An error or hang-up counts as ready: the next read/write reports it.
    return n != 0;
  }
}

}  // namespace lockon::detail
