#include "fanout.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// A non-blocking connect to a node, used only to learn (in parallel with
/// the other nodes) whether the node accepts connections now. Closed in its
/// destructor.
class Dial {
 public:
  /// pending: in progress (poll fd() for POLLOUT). settled: completed or
  /// failed at once (a refused connect fails at once), so
  /// Connection::ensure_connected reports the real outcome without waiting.
  /// full: a unix socket whose accept queue is full (EAGAIN at once, where a
  /// blocking connect would wait): the node accepts no connection now.
  enum class State { pending, settled, full };

  explicit Dial(const ConnectionOptions& options) { start(options); }
  ~Dial() { close_fd(); }
  Dial(const Dial&) = delete;
  Dial& operator=(const Dial&) = delete;
  Dial(Dial&& other) noexcept : fd_(other.fd_), state_(other.state_) { other.fd_ = -1; }
  Dial& operator=(Dial&&) = delete;

  State state() const noexcept { return state_; }
  int fd() const noexcept { return fd_; }
  void settle() noexcept {
    state_ = State::settled;
    close_fd();
  }

 private:
  void start(const ConnectionOptions& options) {
    if (!options.unix_path.empty()) {
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      if (options.unix_path.size() >= sizeof address.sun_path) return settle();
      std::memcpy(address.sun_path, options.unix_path.c_str(), options.unix_path.size() + 1);
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd_ < 0) return settle();
      // A unix socket with a full accept queue answers EAGAIN at once, where
      // a blocking connect would wait: that node accepts no connection now.
      const bool full =
          ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno == EAGAIN;
      settle();
      if (full) state_ = State::full;
      return;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(options.port);
    if (::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return settle();
    fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int rc = fd_ < 0 ? -1 : ::connect(fd_, found->ai_addr, found->ai_addrlen);
    const int saved_errno = errno;
    ::freeaddrinfo(found);
    if (fd_ >= 0 && rc != 0 && saved_errno == EINPROGRESS) {
      state_ = State::pending;
      return;
    }
    settle();
  }

  void close_fd() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  State state_ = State::settled;
};

/// Marks broken every connected target whose server closed the socket or
/// sent something unasked (a restart, `timeout`): those reconnect, and so
/// take part in the parallel connect. One poll() for all of them.
void drop_hung_up(std::span<FanOutTarget> targets) {
  std::vector<pollfd> fds;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const Connection& connection = *targets[i].connection;
    if (!connection.connected()) continue;
    fds.push_back(pollfd{connection.fd(), POLLIN | POLLRDHUP, 0});
    which.push_back(i);
  }
  if (fds.empty()) return;
  if (::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (std::size_t k = 0; k < fds.size(); ++k)
    if (fds[k].revents != 0) targets[which[k]].connection->mark_broken();
}

/// Writes target i's request, connecting first if needed (ensure_connected:
/// immediate when the node just accepted our dial).
void send_one(FanOutTarget& target, FanOutResult& result, std::string_view operation) {
  try {
    Connection& connection = *target.connection;
    connection.ensure_connected();
    target.send(connection);
    connection.flush(operation);
    result.sent = true;
  } catch (...) {
    target.connection->mark_broken();
    result.error = std::current_exception();
  }
}

/// Writes every request; targets that need a connection get a non-blocking
/// dial first, all awaited together until `deadline`, and each is written as
/// soon as its dial settles. Dials still pending at the deadline fail with a
/// ConnectError (nothing was sent).
void connect_and_send(std::span<FanOutTarget> targets, Clock::time_point deadline, std::string_view operation,
                      std::vector<FanOutResult>& results) {
  drop_hung_up(targets);
  std::vector<Dial> dials;
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    Connection& connection = *targets[i].connection;
    if (connection.connected()) {
      send_one(targets[i], results[i], operation);
      continue;
    }
    Dial dial(connection.options());
    if (dial.state() == Dial::State::full) {
      connection.mark_broken();
      results[i].error = std::make_exception_ptr(
          ConnectError("connect to " + connection.endpoint() + " (" + std::string(operation) + "): its accept queue is full"));
    } else if (dial.state() == Dial::State::settled) {
      send_one(targets[i], results[i], operation);
    } else {
      dials.push_back(std::move(dial));
      which.push_back(i);
    }
  }
  const auto start = Clock::now();
  std::size_t pending = dials.size();
  std::vector<pollfd> fds;
  std::vector<std::size_t> slot;
  while (pending > 0) {
    fds.clear();
    slot.clear();
    for (std::size_t k = 0; k < dials.size(); ++k) {
      if (dials[k].state() != Dial::State::pending) continue;
      fds.push_back(pollfd{dials[k].fd(), POLLOUT, 0});
      slot.push_back(k);
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (std::size_t j = 0; n > 0 && j < fds.size(); ++j) {
      if (fds[j].revents == 0) continue;
      // Connected or failed: ensure_connected tells which, without waiting.
      dials[slot[j]].settle();
      --pending;
      const std::size_t i = which[slot[j]];
      send_one(targets[i], results[i], operation);
    }
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  for (std::size_t k = 0; k < dials.size(); ++k) {
    if (dials[k].state() != Dial::State::pending) continue;
    Connection& connection = *targets[which[k]].connection;
    connection.mark_broken();
    results[which[k]].error = std::make_exception_ptr(ConnectError("connect to " + connection.endpoint() + " (" +
                                                                   std::string(operation) + "): no connection within " +
                                                                   std::to_string(waited.count()) + " ms"));
  }
}

}  // namespace

std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, Clock::time_point deadline,
                                  std::string_view operation) {
  std::vector<FanOutResult> results(targets.size());
  connect_and_send(targets, deadline, operation, results);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!results[i].sent) continue;
    Connection& connection = *targets[i].connection;
    try {
      // Replies that arrived while we read earlier nodes are already in the
      // socket buffer: the shared deadline only bounds the genuinely slow.
      ReplyPtr reply = connection.read_reply_until(deadline, operation);
      if (targets[i].finish) reply = targets[i].finish(connection, std::move(reply));
      results[i].reply = std::move(reply);
    } catch (...) {
      connection.mark_broken();
      results[i].error = std::current_exception();
    }
  }
  return results;
}

}  // namespace lockon::detail
