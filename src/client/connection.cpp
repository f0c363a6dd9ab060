#include "client/connection.hpp"

#include <poll.h>

#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "client/error_map.hpp"
#include "lockon/errors.hpp"
#include "client/server_version.hpp"

namespace lockon::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// Our own send(2) rather than hiredis' write(2): MSG_NOSIGNAL. Writing to a
// connection the peer has reset (a killed server, once a request needs a
// second write or a keep-alive probe was answered with a reset) would
// otherwise raise SIGPIPE, whose default action kills the whole process.
// SO_SNDTIMEO (the socket timeout) bounds a blocked send with EAGAIN.
// Returns the bytes written; on failure errno is set and fewer were.
std::size_t send_all(int fd, std::string_view data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EPIPE;
    break;
  }
  return sent;
}

std::int64_t coarse_now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// Records an errno failure as hiredis would, so the one mapping in
// error_map applies.
void record_io_error(redisContext* context, int saved_errno) {
  context->err = REDIS_ERR_IO;
  std::snprintf(context->errstr, sizeof context->errstr, "%s", std::strerror(saved_errno));
  errno = saved_errno;
}

}  // namespace

void append_resp(std::string& out, std::span<const std::string_view> args) {
  // hiredis 0.14 formats argv through sdscatfmt, which costs more client CPU
  // than the rest of a lock cycle; RESP is simple enough to write directly.
  std::size_t size = out.size() + 16;
  for (auto arg : args) size += arg.size() + 24;
  out.reserve(size);
  std::array<char, 24> digits{};
  auto put_header = [&](char kind, std::size_t n) {
    const auto [end, ec] = std::to_chars(digits.data(), digits.data() + digits.size(), n);
    static_cast<void>(ec);
    out.push_back(kind);
    out.append(digits.data(), end);
    out.append("\r\n", 2);
  };
  put_header('*', args.size());
  for (auto arg : args) {
    put_header('$', arg.size());
    out.append(arg);
    out.append("\r\n", 2);
  }
}

Connection::Connection(ConnectionOptions options)
    : options_(std::move(options)), endpoint_(options_.endpoint()) {}

int Connection::fd() const noexcept { return context_ ? context_->fd : -1; }

void Connection::fail(std::string_view operation) {
  const int saved_errno = errno;
  broken_ = true;
  throw_context_error(context_.get(), saved_errno, Phase::command, endpoint_, operation);
}

void Connection::fail_send(int saved_errno, std::string_view operation) {
  record_io_error(context_.get(), saved_errno);
  fail(operation);
}

// An idle request/reply socket has nothing to read: readable bytes, EOF or
// an error mean the server closed it (restart, client `timeout`) or the
// stream is out of step. Only looked at after kIdleCheckAfter of quiet, so
// back-to-back commands pay one clock read and no syscall.
bool Connection::stale() noexcept {
  // The coarse clock (a few ns, tick resolution) is plenty to tell
  // back-to-back use from idleness measured in milliseconds.
  const std::int64_t now = coarse_now_ns();
  const std::int64_t last = last_use_ns_;
  last_use_ns_ = now;
  if (now - last < std::chrono::nanoseconds(kIdleCheckAfter).count()) return false;
  // Opened and then left alone before its handshake was read: cheaper to
  // open again than to tell its replies from a close.
  if (handshake_replies_ > 0) return true;
  const redisReader* reader = context_->reader;
  if (reader != nullptr && reader->len > reader->pos) return true;  // unread reply bytes
  pollfd probe{context_->fd, POLLIN | POLLRDHUP, 0};
  const int n = ::poll(&probe, 1, 0);
  return n != 0;  // readable, hung up, or poll itself failed: not to be trusted
}

void Connection::ensure_connected() {
  if (context_ && !broken_ && (owes_replies() || !stale())) return;
  open(false);
}

void Connection::open(bool keep_queued) {
  context_.reset();
  broken_ = true;  // until connected
  in_flight_ = 0;
  used_ = false;
  handshake_replies_ = 0;
  std::string queued;
  if (keep_queued) {
    queued = std::move(out_);
  } else {
    queued_ = 0;  // requests queued for the broken socket are not replayed
  }
  out_.clear();
  current_timeout_ = std::chrono::milliseconds(-1);
  redisContext* raw = nullptr;
  const bool bounded = options_.connect_timeout.count() > 0;
  if (!options_.unix_path.empty()) {
    raw = bounded ? redisConnectUnixWithTimeout(options_.unix_path.c_str(), to_timeval(options_.connect_timeout))
                  : redisConnectUnix(options_.unix_path.c_str());
  } else {
    raw = bounded ? redisConnectWithTimeout(options_.host.c_str(), options_.port, to_timeval(options_.connect_timeout))
                  : redisConnect(options_.host.c_str(), options_.port);
  }
  ContextPtr context(raw);
  if (!context || context->err) {
    const int saved_errno = errno;
    queued_ = 0;
    throw_context_error(context.get(), saved_errno, Phase::connect, endpoint_, "connect");
  }
  if (options_.keepalive && options_.unix_path.empty()) redisEnableKeepAlive(context.get());
  context_ = std::move(context);
  restore_timeout();
  // HELLO 2 checks the server's version and, carrying AUTH, authenticates;
  // SELECT follows. Both go out in the same write as the first requests.
  const std::string_view user = options_.user.empty() ? std::string_view("default") : std::string_view(options_.user);
  if (options_.password.empty()) {
    const std::array<std::string_view, 2> hello{"HELLO", "2"};
    append_resp(out_, hello);
  } else {
    const std::array<std::string_view, 5> hello{"HELLO", "2", "AUTH", user, options_.password};
    append_resp(out_, hello);
  }
  if (options_.db != 0) {
    const std::string db = std::to_string(options_.db);
    const std::array<std::string_view, 2> select{"SELECT", db};
    append_resp(out_, select);
  }
  out_.append(queued);
  handshake_replies_ = options_.db != 0 ? 2 : 1;
  broken_ = false;
  last_use_ns_ = coarse_now_ns();
}

ReplyPtr Connection::next_reply(const Clock::time_point* deadline, Phase phase, std::string_view operation) {
  redisContext* context = context_.get();
  const auto failed = [&] {
    const int saved_errno = errno;
    broken_ = true;
    throw_context_error(context, saved_errno, phase, endpoint_, operation);
  };
  if (deadline == nullptr) {
    void* raw = nullptr;
    if (redisGetReply(context, &raw) != REDIS_OK) failed();
    return ReplyPtr(static_cast<redisReply*>(raw));
  }
  while (true) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context, &raw) != REDIS_OK) failed();
    if (raw != nullptr) return ReplyPtr(static_cast<redisReply*>(raw));
    // No complete reply buffered: wait for bytes with poll() instead of
    // changing SO_RCVTIMEO per call (two syscalls each time, per node).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
    pollfd ready{context->fd, POLLIN, 0};
    // Past the deadline still look (timeout 0): a reply that arrived while
    // we waited on a slower node is sitting in the socket buffer.
    const int n = ::poll(&ready, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // The reply is still owed: this connection's stream is out of step.
      record_io_error(context, ETIMEDOUT);
      failed();
    }
    if (redisBufferRead(context) != REDIS_OK) failed();
  }
}

// Reads and checks the handshake's replies. Requests written behind the
// handshake make an I/O failure here ambiguous (they may have run), so it
// maps as any command's; without them nothing was sent (ConnectError).
void Connection::finish_handshake(const Clock::time_point* deadline, std::string_view caller) {
  if (handshake_replies_ == 0) return;
  // Names both: "SET (connection handshake: HELLO with AUTH)".
  const std::string operation = std::string(caller) + (options_.password.empty()
                                                           ? " (connection handshake: HELLO)"
                                                           : " (connection handshake: HELLO with AUTH)");
  const Phase phase = in_flight_ > 0 ? Phase::command : Phase::connect;
  std::array<ReplyPtr, 2> replies;
  const int expected = handshake_replies_;
  for (int i = 0; i < expected; ++i) {
    replies[static_cast<std::size_t>(i)] = next_reply(deadline, phase, operation);
    --handshake_replies_;
  }
  try {
    check_hello_reply(*replies[0], endpoint_, operation);
    if (expected == 2) check_reply(*replies[1], endpoint_, "SELECT " + std::to_string(options_.db));
  } catch (...) {
    broken_ = true;  // the requests behind it are answered by errors, or unknown
    throw;
  }
}

void Connection::complete_handshake() {
  flush("connect");
  finish_handshake(nullptr, "connect");
}

void Connection::append(std::span<const std::string_view> args) {
  append_resp(out_, args);
  ++queued_;
}

void Connection::flush(std::string_view operation) {
  if (out_.empty()) return;
  std::size_t sent = send_all(context_->fd, out_);
  if (sent == 0 && used_ && in_flight_ == 0) {
    // Not a byte left, on a socket that worked before and owes nothing: it
    // went stale after the idle check (or within kIdleCheckAfter). The
    // requests cannot have reached the server: once, send them on a fresh
    // socket (behind its handshake).
    open(true);
    sent = send_all(context_->fd, out_);
  }
  if (sent == 0 && in_flight_ == 0) {
    // Still nothing sent, on a fresh socket: nothing reached the server.
    const int saved_errno = errno;
    out_.clear();
    queued_ = 0;
    broken_ = true;
    record_io_error(context_.get(), saved_errno);
    throw_context_error(context_.get(), saved_errno, Phase::connect, endpoint_, operation);
  }
  if (sent != out_.size()) {
    const int saved_errno = errno;
    out_.clear();
    fail_send(saved_errno, operation);
  }
  in_flight_ += queued_;
  queued_ = 0;
  used_ = true;
  out_.clear();
  if (out_.capacity() > (std::size_t{1} << 20)) out_ = std::string();  // no MBs kept after a huge request
}

void Connection::got_reply() noexcept {
  if (in_flight_ > 0) --in_flight_;
}

ReplyPtr Connection::read_reply_until(Clock::time_point deadline, std::string_view operation) {
  flush(operation);
  finish_handshake(&deadline, operation);
  ReplyPtr reply = next_reply(&deadline, Phase::command, operation);
  got_reply();
  return reply;
}

ReplyPtr Connection::read_reply(std::string_view operation) {
  flush(operation);  // hiredis then has nothing to write
  finish_handshake(nullptr, operation);
  ReplyPtr reply = next_reply(nullptr, Phase::command, operation);
  got_reply();
  return reply;
}

ReplyPtr Connection::command(std::span<const std::string_view> args, std::string_view operation) {
  ensure_connected();
  append(args);
  return read_reply(operation);
}

void Connection::set_timeout(std::chrono::milliseconds timeout) {
  if (!context_ || timeout == current_timeout_) return;
  // hiredis treats a zero timeval as "no timeout" on the socket.
  if (redisSetTimeout(context_.get(), to_timeval(timeout)) != REDIS_OK) fail("set socket timeout");
  current_timeout_ = timeout;
}

void Connection::restore_timeout() { set_timeout(options_.socket_timeout); }

}  // namespace lockon::detail
