#include "connection.hpp"

#include <poll.h>

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "error_map.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

}  // namespace

Connection::Connection(ConnectionOptions options)
    : options_(std::move(options)), endpoint_(options_.endpoint()) {}

int Connection::fd() const noexcept { return context_ ? context_->fd : -1; }

void Connection::fail(std::string_view operation) {
  const int saved_errno = errno;
  broken_ = true;
  throw_context_error(context_.get(), saved_errno, Phase::command, endpoint_, operation);
}

void Connection::ensure_connected() {
  if (context_ && !broken_) return;
  context_.reset();
  broken_ = false;
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
  out_.clear();  // requests queued for the broken socket are not replayed
  if (!context || context->err) {
    const int saved_errno = errno;
    throw_context_error(context.get(), saved_errno, Phase::connect, endpoint_, "connect");
  }
  if (options_.keepalive && options_.unix_path.empty()) redisEnableKeepAlive(context.get());
  context_ = std::move(context);
  try {
    restore_timeout();
    handshake();
  } catch (...) {
    context_.reset();
    throw;
  }
}

void Connection::handshake() {
  if (!options_.password.empty()) {
    ReplyPtr reply;
    if (options_.user.empty()) {
      const std::array<std::string_view, 2> args{"AUTH", options_.password};
      reply = command(args, "AUTH");
    } else {
      const std::array<std::string_view, 3> args{"AUTH", options_.user, options_.password};
      reply = command(args, "AUTH");
    }
    check_reply(*reply, endpoint_, "AUTH");
  }
  if (options_.db != 0) {
    const std::string db = std::to_string(options_.db);
    const std::array<std::string_view, 2> args{"SELECT", db};
    ReplyPtr reply = command(args, "SELECT " + db);
    check_reply(*reply, endpoint_, "SELECT " + db);
  }
}

void Connection::append(std::span<const std::string_view> args) {
  // hiredis 0.14 formats argv through sdscatfmt, which costs more client CPU
  // than the rest of a lock cycle; RESP is simple enough to write directly.
  // Requests stay in our own buffer until flush() sends them.
  std::string& out = out_;
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

void Connection::flush(std::string_view operation) {
  // Our own send(2) rather than hiredis' write(2): MSG_NOSIGNAL. Writing to
  // a connection the peer has reset (a killed server, once a request needs a
  // second write or a keep-alive probe was answered with a reset) would
  // otherwise raise SIGPIPE, whose default action kills the whole process.
  // SO_SNDTIMEO (the socket timeout) bounds a blocked send with EAGAIN.
  std::size_t sent = 0;
  while (sent < out_.size()) {
    const ssize_t n = ::send(context_->fd, out_.data() + sent, out_.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int saved_errno = n < 0 ? errno : EPIPE;
    out_.clear();
    // Record it as hiredis would, so the one mapping in error_map applies.
    context_->err = REDIS_ERR_IO;
    std::snprintf(context_->errstr, sizeof context_->errstr, "%s", std::strerror(saved_errno));
    errno = saved_errno;
    fail(operation);
  }
  out_.clear();
  if (out_.capacity() > (std::size_t{1} << 20)) out_ = std::string();  // no MBs kept after a huge request
}

ReplyPtr Connection::read_reply_until(std::chrono::steady_clock::time_point deadline, std::string_view operation) {
  if (!out_.empty()) flush(operation);
  redisContext* context = context_.get();
  while (true) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(context, &raw) != REDIS_OK) fail(operation);
    if (raw != nullptr) return ReplyPtr(static_cast<redisReply*>(raw));
    // No complete reply buffered: wait for bytes with poll() instead of
    // changing SO_RCVTIMEO per call (two syscalls each time, per node).
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd ready{context->fd, POLLIN, 0};
    // Past the deadline still look (timeout 0): a reply that arrived while
    // we waited on a slower node is sitting in the socket buffer.
    const int n = ::poll(&ready, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      // The reply is still owed: this connection's stream is out of step.
      context->err = REDIS_ERR_IO;
      std::snprintf(context->errstr, sizeof context->errstr, "%s", std::strerror(ETIMEDOUT));
      errno = ETIMEDOUT;
      fail(operation);
    }
    if (redisBufferRead(context) != REDIS_OK) fail(operation);
  }
}

ReplyPtr Connection::read_reply(std::string_view operation) {
  if (!out_.empty()) flush(operation);  // hiredis then has nothing to write
  void* raw = nullptr;
  if (redisGetReply(context_.get(), &raw) != REDIS_OK) fail(operation);
  return ReplyPtr(static_cast<redisReply*>(raw));
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
