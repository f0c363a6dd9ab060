// support/fault_proxy_loop.cpp — FaultProxy's thread: one ppoll() loop over
// non-blocking sockets. Timers (latency, delays) are due times in per-link
// queues; the loop sleeps until the earliest one or the next socket event.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <memory>

#include "support/fault_proxy.hpp"
#include "support/fault_proxy_resp.hpp"

namespace lockon::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxMessage = 64u << 20;  // one command or reply; larger closes the link
constexpr std::size_t kHighWater = 1u << 20;    // queued bytes per direction before reading stops
constexpr std::size_t kReadChunk = 64u << 10;
constexpr auto kCoalesce = std::chrono::microseconds(20);

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// What to do with a command once its due time comes (decided when it was parsed).
enum class Step {
  forward,             // to the server; its reply goes to the client
  forward_unpaired,    // to the server; no reply expected (empty command)
  forward_enter_raw,   // SUBSCRIBE & co.: after its reply, server bytes pass unpaired
  forward_then_close,  // close_after_forward
  forward_then_cut,    // close_mid_reply
  answer_error,        // error_reply
  close_instead,       // close_before_forward
  swallow,             // blackhole rule, and everything after a closing action
};

struct UpItem {
  Clock::time_point due;
  Step step;
  std::string bytes;  // the command as sent, or the error reply's text
};

/// What the next server reply (or the proxy itself) owes the client, in order.
enum class Owed { reply, reply_then_close, reply_cut_then_close, synthetic, close, enter_raw };
struct OwedItem {
  Owed kind;
  std::string text;  // synthetic reply bytes
};

struct DownItem {
  Clock::time_point due;
  std::string bytes;
  bool close = false;  // close the link once everything before it was written
};

// A proxied connection: the client's socket and ours to the server.
struct Link {
  std::size_t index = 0;
  int client = -1;
  int server = -1;
  bool connecting = true;
  std::string client_in;  // bytes read from the client, not yet a whole command
  std::string server_in;  // bytes read from the server, not yet a whole reply
  std::deque<UpItem> up;
  std::size_t up_bytes = 0;
  std::size_t up_written = 0;  // of up.front()
  Clock::time_point last_up_due{};
  std::deque<OwedItem> owed;
  std::deque<DownItem> down;
  std::size_t down_bytes = 0;
  std::size_t down_written = 0;  // of down.front()
  Clock::time_point last_down_due{};
  bool swallowing = false;  // later commands are dropped
  bool raw = false;         // server bytes are forwarded unpaired (pub/sub, MONITOR)
  bool closing = false;     // a close is queued: nothing more is read or paired
  bool client_eof = false;
  bool client_blocked = false;  // EAGAIN writing to the client
  bool server_blocked = false;  // EAGAIN writing to the server
  bool closed = false;

  ~Link() {
    if (client >= 0) ::close(client);
    if (server >= 0) ::close(server);
  }
};

// Writes bytes[offset..]; advances offset. False on a socket error; sets
// `blocked` when the socket is full.
bool write_some(int fd, const std::string& bytes, std::size_t& offset, bool& blocked) {
  while (offset < bytes.size()) {
    const auto n = ::send(fd, bytes.data() + offset, bytes.size() - offset, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        blocked = true;
        return true;
      }
      return false;
    }
    offset += static_cast<std::size_t>(n);
  }
  return true;
}

enum class Read { some, eof, failed };

// Appends what is readable (up to one chunk) to `into`.
Read read_some(int fd, std::string& into) {
  char buffer[kReadChunk];
  for (;;) {
    const auto n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      into.append(buffer, static_cast<std::size_t>(n));
      return Read::some;
    }
    if (n == 0) return Read::eof;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? Read::some : Read::failed;
  }
}

int start_connect(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1 ||
      (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 &&
       errno != EINPROGRESS)) {
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

bool is_subscribe(std::string_view name) {
  return name == "SUBSCRIBE" || name == "PSUBSCRIBE" || name == "SSUBSCRIBE" || name == "MONITOR";
}

}  // namespace

class FaultProxy::Loop {
 public:
  explicit Loop(FaultProxy& proxy) : proxy_(proxy) {}
  void run();

 private:
  Clock::duration latency() const {
    return std::chrono::microseconds(proxy_.latency_us_.load(std::memory_order_relaxed));
  }
  void accept_clients();
  void handle_control(bool& stop);
  void read_client(Link& link);
  void read_server(Link& link);
  void parse_commands(Link& link);
  void queue_up(Link& link, Step step, std::string bytes, Clock::duration extra);
  void flush_up(Link& link, Clock::time_point now);
  void pair_replies(Link& link);
  void pair_replies(Link& link, std::size_t& consumed);
  void emit(Link& link, std::string bytes);
  void emit_close(Link& link);
  void flush_down(Link& link, Clock::time_point now);
  void close_all();

  FaultProxy& proxy_;
  std::vector<std::unique_ptr<Link>> links_;
};

void FaultProxy::run() noexcept {
  // The default 50 us timer slack would add to every latency and delay.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  try {
    Loop(*this).run();
  } catch (...) {  // out of memory: the proxy dies, its clients see EOF
  }
  live_connections_.store(0);
  const std::lock_guard lock(mutex_);
  drops_done_ = drop_requests_;
  drops_cv_.notify_all();
}

void FaultProxy::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = Clock::now();
    const bool held = proxy_.blackholed_.load();
    auto next_due = Clock::time_point::max();
    for (auto& owner : links_) {
      Link& link = *owner;
      if (!held) {
        flush_up(link, now);
        pair_replies(link);
        flush_down(link, now);
        if (!link.connecting && !link.server_blocked && !link.up.empty()) {
          next_due = std::min(next_due, link.up.front().due);
        }
        if (!link.client_blocked && !link.down.empty()) next_due = std::min(next_due, link.down.front().due);
      } else {
        pair_replies(link);
      }
      if (link.client_eof && link.up.empty()) link.closed = true;
    }
    std::erase_if(links_, [](const std::unique_ptr<Link>& link) { return link->closed; });
    proxy_.live_connections_.store(links_.size());

    // fds: wake, listener, then client and server of each link.
    fds.clear();
    fds.push_back({proxy_.wake_fd_, POLLIN, 0});
    fds.push_back({proxy_.listen_fd_, POLLIN, 0});
    for (auto& owner : links_) {
      Link& link = *owner;
      short client_events = 0;
      short server_events = 0;
      const bool readable = !link.closing && link.client_in.size() < kMaxMessage;
      if (readable && !link.client_eof && link.up_bytes < kHighWater) client_events |= POLLIN;
      if (link.client_blocked) client_events |= POLLOUT;
      if (link.connecting || link.server_blocked) server_events |= POLLOUT;
      if (!link.connecting && !link.closing && link.down_bytes < kHighWater &&
          link.server_in.size() < kMaxMessage) {
        server_events |= POLLIN;
      }
      // A socket with nothing wanted is left out: a hung-up peer would
      // otherwise report POLLHUP in every round (a busy loop).
      fds.push_back({client_events != 0 ? link.client : -1, client_events, 0});
      fds.push_back({server_events != 0 ? link.server : -1, server_events, 0});
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

    const std::size_t polled = links_.size();  // accept_clients appends
    for (std::size_t i = 0; i < polled; ++i) {
      Link& link = *links_[i];
      const short client_events = fds[2 + 2 * i].revents;
      const short server_events = fds[3 + 2 * i].revents;
      if (server_events != 0 && link.connecting) {
        int error = 0;
        socklen_t size = sizeof error;
        ::getsockopt(link.server, SOL_SOCKET, SO_ERROR, &error, &size);
        if (error != 0) {
          link.closed = true;
          continue;
        }
        link.connecting = false;
      } else if (server_events & POLLOUT) {
        link.server_blocked = false;
      }
      if (client_events & POLLOUT) link.client_blocked = false;
      if (client_events & (POLLIN | POLLHUP | POLLERR)) read_client(link);
      if (!link.connecting && (server_events & (POLLIN | POLLHUP | POLLERR))) read_server(link);
    }
    if (fds[1].revents & POLLIN) accept_clients();
    if (fds[0].revents & POLLIN) {
      bool stop = false;
      handle_control(stop);
      if (stop) return;
    }
  }
}

void FaultProxy::Loop::handle_control(bool& stop) {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto got = ::read(proxy_.wake_fd_, &value, sizeof value);
  const std::lock_guard lock(proxy_.mutex_);
  if (proxy_.stopping_) {
    stop = true;
    return;
  }
  if (proxy_.drops_done_ < proxy_.drop_requests_) {
    links_.clear();
    proxy_.live_connections_.store(0);
    proxy_.drops_done_ = proxy_.drop_requests_;
    proxy_.drops_cv_.notify_all();
  }
}

void FaultProxy::Loop::accept_clients() {
  for (int i = 0; i < 64; ++i) {
    const int client = ::accept4(proxy_.listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) return;
    if (proxy_.refuse_.load()) {
      close_with_reset(client);
      continue;
    }
    std::string host;
    int port = 0;
    {
      const std::lock_guard lock(proxy_.mutex_);
      host = proxy_.upstream_host_;
      port = proxy_.upstream_port_;
    }
    const int server = start_connect(host, port);
    if (server < 0) {  // the upstream refuses: so does the proxy
      close_with_reset(client);
      continue;
    }
    no_delay(client);
    auto link = std::make_unique<Link>();
    link->index = proxy_.accepted_.fetch_add(1);
    link->client = client;
    link->server = server;
    links_.push_back(std::move(link));
  }
}

void FaultProxy::Loop::read_client(Link& link) {
  const Read result = read_some(link.client, link.client_in);
  if (result == Read::failed) {  // a reset: gone at once
    link.closed = true;
    return;
  }
  // On EOF what the client sent before still goes to the server; then the
  // link closes.
  if (result == Read::eof) link.client_eof = true;
  parse_commands(link);
}

void FaultProxy::Loop::parse_commands(Link& link) {
  resp::Command command;
  std::size_t consumed = 0;
  for (;;) {
    const std::string_view rest = std::string_view(link.client_in).substr(consumed);
    const resp::Scan scan = resp::scan_command(rest, command);
    if (scan == resp::Scan::incomplete) {
      if (rest.size() >= kMaxMessage) link.closed = true;
      break;
    }
    if (scan == resp::Scan::malformed) {  // Redis would close it too, with an error
      link.closed = true;
      break;
    }
    std::string bytes(rest.substr(0, command.length));
    consumed += command.length;
    if (command.words.empty()) {
      queue_up(link, link.swallowing ? Step::swallow : Step::forward_unpaired, std::move(bytes), {});
      continue;
    }
    proxy_.commands_seen_.fetch_add(1);
    if (link.swallowing) {
      queue_up(link, Step::swallow, {}, {});
      continue;
    }
    const Decision decision = proxy_.decide(link.index, command.name, command.words);
    Clock::duration extra{};
    Step step = is_subscribe(command.name) ? Step::forward_enter_raw : Step::forward;
    switch (decision.action) {
      case FaultAction::pass:
        break;
      case FaultAction::delay:
        extra = decision.delay;
        break;
      case FaultAction::close_before_forward:
        step = Step::close_instead;
        break;
      case FaultAction::close_after_forward:
        step = Step::forward_then_close;
        break;
      case FaultAction::close_mid_reply:
        step = Step::forward_then_cut;
        break;
      case FaultAction::error_reply:
        step = Step::answer_error;
        bytes = "-" + decision.error + "\r\n";
        break;
      case FaultAction::blackhole:
        step = Step::swallow;
        break;
    }
    if (step != Step::forward && step != Step::forward_enter_raw && step != Step::answer_error) {
      link.swallowing = true;
    }
    queue_up(link, step, std::move(bytes), extra);
  }
  link.client_in.erase(0, consumed);
}

void FaultProxy::Loop::queue_up(Link& link, Step step, std::string bytes, Clock::duration extra) {
  // TCP keeps order: nothing overtakes a delayed command.
  const auto due = std::max(link.last_up_due, Clock::now() + latency() + extra);
  link.last_up_due = due;
  link.up_bytes += bytes.size();
  link.up.push_back({due, step, std::move(bytes)});
}

void FaultProxy::Loop::flush_up(Link& link, Clock::time_point now) {
  while (!link.connecting && !link.server_blocked && !link.up.empty() && link.up.front().due <= now) {
    UpItem& item = link.up.front();
    const bool forwards = item.step == Step::forward || item.step == Step::forward_unpaired ||
                          item.step == Step::forward_enter_raw || item.step == Step::forward_then_close ||
                          item.step == Step::forward_then_cut;
    if (forwards) {
      if (!write_some(link.server, item.bytes, link.up_written, link.server_blocked)) {
        link.closed = true;
        return;
      }
      if (link.server_blocked) return;
    }
    switch (item.step) {
      case Step::forward: link.owed.push_back({Owed::reply, {}}); break;
      case Step::forward_unpaired: break;
      case Step::forward_enter_raw:  // once earlier replies are paired (RESP3 confirms with a push)
        link.owed.push_back({Owed::enter_raw, {}});
        break;
      case Step::forward_then_close: link.owed.push_back({Owed::reply_then_close, {}}); break;
      case Step::forward_then_cut: link.owed.push_back({Owed::reply_cut_then_close, {}}); break;
      case Step::answer_error: link.owed.push_back({Owed::synthetic, item.bytes}); break;
      case Step::close_instead: link.owed.push_back({Owed::close, {}}); break;
      case Step::swallow: break;
    }
    link.up_bytes -= item.bytes.size();
    link.up_written = 0;
    link.up.pop_front();
  }
}

void FaultProxy::Loop::read_server(Link& link) {
  if (read_some(link.server, link.server_in) == Read::some) {
    pair_replies(link);
    return;
  }
  // The server closed (or reset): the client gets what arrived, then EOF.
  pair_replies(link);
  if (!link.closing) {
    if (!link.server_in.empty()) emit(link, std::move(link.server_in));
    emit_close(link);
  }
}

void FaultProxy::Loop::pair_replies(Link& link) {
  std::size_t consumed = 0;  // of server_in; erased once at the end (pipelines)
  pair_replies(link, consumed);
  if (!link.closing) link.server_in.erase(0, consumed);
}

void FaultProxy::Loop::pair_replies(Link& link, std::size_t& consumed) {
  const auto forward_rest = [&] {
    if (consumed < link.server_in.size()) emit(link, link.server_in.substr(consumed));
    consumed = link.server_in.size();
  };
  while (!link.closing) {
    if (!link.owed.empty()) {
      OwedItem& front = link.owed.front();
      if (front.kind == Owed::synthetic) {
        emit(link, std::move(front.text));
        link.owed.pop_front();
        continue;
      }
      if (front.kind == Owed::close) {
        emit_close(link);
        return;
      }
      if (front.kind == Owed::enter_raw) {
        link.raw = true;
        link.owed.pop_front();
        continue;
      }
      if (link.raw) {  // replies are not told apart from pushes any more
        const bool closes = front.kind != Owed::reply;
        link.owed.pop_front();
        if (closes) {
          forward_rest();
          emit_close(link);
          return;
        }
        continue;
      }
    }
    if (consumed == link.server_in.size()) return;
    if (link.raw) {
      forward_rest();
      return;
    }
    const std::string_view rest = std::string_view(link.server_in).substr(consumed);
    std::size_t length = 0;
    const resp::Scan scan = resp::scan_reply(rest, length);
    if (scan == resp::Scan::incomplete) {
      if (rest.size() >= kMaxMessage) link.closed = true;  // no longer polled: give up
      return;
    }
    if (scan == resp::Scan::malformed) {
      link.closed = true;
      return;
    }
    const std::string_view reply = rest.substr(0, length);
    consumed += length;
    if (reply.front() == '>' || link.owed.empty()) {  // RESP3 push, or a reply nobody asked for
      emit(link, std::string(reply));
      continue;
    }
    const Owed kind = link.owed.front().kind;
    link.owed.pop_front();
    if (kind == Owed::reply) {
      emit(link, std::string(reply));
    } else {
      if (kind == Owed::reply_cut_then_close) {
        emit(link, std::string(reply.substr(0, std::max<std::size_t>(1, length / 2))));
      }
      emit_close(link);
    }
  }
}

void FaultProxy::Loop::emit(Link& link, std::string bytes) {
  const auto due = std::max(link.last_down_due, Clock::now() + latency());
  link.last_down_due = due;
  link.down_bytes += bytes.size();
  // Replies parsed from one read leave in one write: they join the last
  // chunk if it is due within kCoalesce (all of it then waits until the
  // latest due time, so no byte is early).
  if (!link.down.empty() && !link.down.back().close && due - link.down.back().due <= kCoalesce) {
    link.down.back().due = due;
    link.down.back().bytes += bytes;
    return;
  }
  link.down.push_back({due, std::move(bytes), false});
}

void FaultProxy::Loop::emit_close(Link& link) {
  const auto due = std::max(link.last_down_due, Clock::now() + latency());
  link.last_down_due = due;
  link.down.push_back({due, {}, true});
  link.closing = true;
  link.owed.clear();
  link.server_in.clear();
}

void FaultProxy::Loop::flush_down(Link& link, Clock::time_point now) {
  while (!link.client_blocked && !link.down.empty() && link.down.front().due <= now) {
    DownItem& item = link.down.front();
    if (item.close) {
      link.closed = true;
      return;
    }
    if (!write_some(link.client, item.bytes, link.down_written, link.client_blocked)) {
      link.closed = true;
      return;
    }
    if (link.client_blocked) return;
    link.down_bytes -= item.bytes.size();
    link.down_written = 0;
    link.down.pop_front();
  }
}

}  // namespace lockon::test
