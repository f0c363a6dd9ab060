#include "connection.hpp"

#include <sys/time.h>

#include <array>
#include <charconv>
#include <cerrno>
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
  std::string& out = scratch_;
  out.clear();
  std::size_t size = 16;
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
  if (redisAppendFormattedCommand(context_.get(), out.data(), out.size()) != REDIS_OK) throw std::bad_alloc();
}

void Connection::flush(std::string_view operation) {
  int done = 0;
  do {
    if (redisBufferWrite(context_.get(), &done) != REDIS_OK) fail(operation);
  } while (!done);
}

ReplyPtr Connection::read_reply(std::string_view operation) {
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
