#include "client/fanout.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = std::chrono::steady_clock;

/// A non-blocking probe of a node that needs a new connection: connect,
/// then one PING, both awaited in parallel with the other nodes' probes. It
/// tells, within the fan-out's deadline, whether the node accepts
/// connections *and answers* now; only then does Connection open its own
/// (blocking) connection and handshake, which are then quick. Any answer
/// counts, NOAUTH included: it is liveness, not a session. Closed in its
/// destructor.
class Dial {
 public:
  /// connecting: poll fd() for POLLOUT. answering: PING sent, poll fd() for
  /// POLLIN. settled: connected and answered, or failed at once (a refused
  /// connect fails at once): Connection::ensure_connected reports the real
  /// outcome without waiting. full: a unix socket whose accept queue is full
  /// (EAGAIN at once, where a blocking connect would wait).
  enum class State { connecting, answering, settled, full };

  explicit Dial(const ConnectionOptions& options) { start(options); }
  ~Dial() { close_fd(); }
  Dial(const Dial&) = delete;
  Dial& operator=(const Dial&) = delete;
  Dial(Dial&& other) noexcept : fd_(other.fd_), state_(other.state_) { other.fd_ = -1; }
  Dial& operator=(Dial&&) = delete;

  State state() const noexcept { return state_; }
  bool pending() const noexcept { return state_ == State::connecting || state_ == State::answering; }
  int fd() const noexcept { return fd_; }
  short events() const noexcept { return state_ == State::connecting ? POLLOUT : POLLIN; }

  /// After poll() reported `revents` on fd(): moves one step on.
  void advance(short revents) noexcept {
    if (state_ == State::connecting) {
      int error = 0;
      socklen_t size = sizeof error;
      if ((revents & (POLLERR | POLLHUP)) != 0 || ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &size) != 0 ||
          error != 0)
        return settle();  // refused or reset: ensure_connected says so at once
      return ask();
    }
    settle();  // an answer (or EOF, or an error): the node is not frozen
  }

  /// What a Dial still pending at the deadline was waiting for.
  const char* waiting_for() const noexcept {
    return state_ == State::connecting ? "no connection" : "connected, but no answer to PING";
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
      if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return ask();
      // A unix socket with a full accept queue answers EAGAIN at once, where
      // a blocking connect would wait: that node accepts no connection now.
      const bool full = errno == EAGAIN;
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
    if (fd_ >= 0 && rc == 0) return ask();
    if (fd_ >= 0 && saved_errno == EINPROGRESS) {
      state_ = State::connecting;
      return;
    }
    settle();
  }

  // A frozen server (SIGSTOP) still has the kernel accept its connections:
  // only an answer shows it runs.
  void ask() noexcept {
    static constexpr char kPing[] = "PING\r\n";
    if (::send(fd_, kPing, sizeof kPing - 1, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof kPing - 1)) return settle();
    state_ = State::answering;
  }

  void settle() noexcept {
    state_ = State::settled;
    close_fd();
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
    Connection& connection = *targets[i].connection;
    if (!connection.connected()) continue;
    // Replies abandoned by an earlier decided fan-out make it readable:
    // drop those that arrived; what remains readable is unexpected.
    if (!connection.drop_arrived_abandoned()) continue;
    if (connection.abandoned_replies() > 0) continue;  // more may still come: not a sign of death
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

/// Reads target i's reply (already announced by poll, or by the deadline:
/// then only what is buffered) and post-processes it.
void read_one(FanOutTarget& target, FanOutResult& result, Clock::time_point deadline, std::string_view operation) {
  Connection& connection = *target.connection;
  try {
    ReplyPtr reply = connection.read_reply_until(deadline, operation);
    if (target.finish) reply = target.finish(connection, std::move(reply));
    result.reply = std::move(reply);
  } catch (...) {
    connection.mark_broken();
    result.error = std::current_exception();
  }
}

}  // namespace

// One event loop until the deadline: dials move on as their sockets become
// ready (a settled dial's request is written at once), and replies are read
// as they arrive — so a slow node delays nobody's reply handling (e.g. the
// NOSCRIPT → EVAL fallback of a healthy node runs when its NOSCRIPT arrives,
// not after the slowest node gave up).
std::vector<FanOutResult> fan_out(std::span<FanOutTarget> targets, Clock::time_point deadline,
                                  std::string_view operation) {
  return fan_out_until_enough(targets, deadline, operation, {});
}

std::vector<FanOutResult> fan_out_until_enough(std::span<FanOutTarget> targets, Clock::time_point deadline,
                                               std::string_view operation, const FanOutEnough& enough) {
  std::vector<FanOutResult> results(targets.size());
  std::vector<bool> done(targets.size(), false);
  std::vector<std::optional<Dial>> dials(targets.size());
  drop_hung_up(targets);
  for (std::size_t i = 0; i < targets.size(); ++i) {
    Connection& connection = *targets[i].connection;
    if (connection.connected()) {
      send_one(targets[i], results[i], operation);
      continue;
    }
    dials[i].emplace(connection.options());
    if (dials[i]->state() == Dial::State::full) {
      connection.mark_broken();
      results[i].error = std::make_exception_ptr(
          ConnectError("connect to " + connection.endpoint() + " (" + std::string(operation) + "): its accept queue is full"));
    } else if (!dials[i]->pending()) {
      send_one(targets[i], results[i], operation);
    }
  }
  const auto start = Clock::now();
  std::vector<pollfd> fds;
  std::vector<std::size_t> which;
  bool decided = false;
  Clock::time_point until = deadline;
  while (true) {
    if (!decided && enough && enough(results)) {
      // Decided: still read, for a grace period, the replies of nodes that
      // have been answering (so a healthy node's reply is not thrown away
      // with its connection); nodes the caller suspects get none.
      decided = true;
      const auto grace = std::max<Clock::duration>(Clock::now() - start, std::chrono::milliseconds(2));
      until = std::min(deadline, Clock::now() + grace);
    }
    fds.clear();
    which.clear();
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (decided && !targets[i].grace_after_decided) continue;
      if (dials[i] && dials[i]->pending()) {
        fds.push_back(pollfd{dials[i]->fd(), dials[i]->events(), 0});
      } else if (results[i].sent && !done[i]) {
        fds.push_back(pollfd{targets[i].connection->fd(), POLLIN, 0});
      } else {
        continue;
      }
      which.push_back(i);
    }
    if (fds.empty()) break;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    for (std::size_t j = 0; n > 0 && j < fds.size(); ++j) {
      if (fds[j].revents == 0) continue;
      const std::size_t i = which[j];
      if (dials[i] && dials[i]->pending()) {
        dials[i]->advance(fds[j].revents);
        // Answered or failed: ensure_connected tells which, without waiting.
        if (!dials[i]->pending()) send_one(targets[i], results[i], operation);
      } else {
        read_one(targets[i], results[i], deadline, operation);
        done[i] = true;
      }
    }
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  if (decided) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      Connection& connection = *targets[i].connection;
      const bool dialing = dials[i] && dials[i]->pending();
      if (!dialing && !(results[i].sent && !done[i])) continue;
      // A sent request's reply is dropped when it comes, keeping the
      // connection warm; a dial in progress is closed.
      if (dialing || !connection.abandon_replies()) connection.mark_broken();
      results[i].abandoned = true;
      const std::string after = " after " + std::to_string(waited.count()) + " ms; the other nodes' replies decided";
      if (dialing) {
        results[i].error = std::make_exception_ptr(ConnectError("connect to " + connection.endpoint() + " (" +
                                                                std::string(operation) + "): not waited for" + after));
      } else {
        results[i].error = std::make_exception_ptr(
            TimeoutError(std::string(operation) + " on " + connection.endpoint() + ": reply not waited for" + after));
      }
    }
    return results;
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (dials[i] && dials[i]->pending()) {
      Connection& connection = *targets[i].connection;
      connection.mark_broken();
      results[i].error = std::make_exception_ptr(
          ConnectError("connect to " + connection.endpoint() + " (" + std::string(operation) + "): " +
                       dials[i]->waiting_for() + " within " + std::to_string(waited.count()) + " ms"));
    } else if (results[i].sent && !done[i]) {
      // Past the deadline: a reply already in the socket buffer is still
      // taken, anything else is a TimeoutError.
      read_one(targets[i], results[i], deadline, operation);
    }
  }
  return results;
}

}  // namespace lockon::detail
