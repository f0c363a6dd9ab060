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

std::int64_t coarse_now_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

Connection::Clock::time_point after(std::chrono::milliseconds timeout) noexcept {
  if (timeout.count() <= 0) return Connection::Clock::time_point::max();
  return Connection::Clock::now() + timeout;
}

}  // namespace

namespace {

std::size_t decimal_digits(std::size_t n) noexcept {
  std::size_t digits = 1;
  while (n >= 10) {
    n /= 10;
    ++digits;
  }
  return digits;
}

// Writes "<kind><n>\r\n" at `at` (exactly 3 + decimal_digits(n) bytes).
char* put_header(char* at, char kind, std::size_t n) noexcept {
  *at++ = kind;
  const auto [end, ec] = std::to_chars(at, at + 20, n);
  static_cast<void>(ec);  // 20 digits hold any size_t
  end[0] = '\r';
  end[1] = '\n';
  return end + 2;
}

}  // namespace

void append_resp(std::string& out, std::span<const std::string_view> args) {
  // hiredis 0.14 formats argv through sdscatfmt, which costs more client CPU
  // than the rest of a lock cycle; RESP is simple enough to write directly.
  // One resize to the exact size, then plain copies: appending piece by
  // piece cost ~170 instructions per argument (callgrind), most of a lock
  // cycle's formatting.
  std::size_t size = 3 + decimal_digits(args.size());
  for (auto arg : args) size += 5 + decimal_digits(arg.size()) + arg.size();
  const std::size_t start = out.size();
  out.resize(start + size);
  char* at = put_header(out.data() + start, '*', args.size());
  for (auto arg : args) {
    at = put_header(at, '$', arg.size());
    if (!arg.empty()) std::memcpy(at, arg.data(), arg.size());
    at += arg.size();
    at[0] = '\r';
    at[1] = '\n';
    at += 2;
  }
}

Connection::Connection(ConnectionOptions options, ServerRole role)
    : options_(std::move(options)), endpoint_(options_.endpoint()), role_(role) {}

Connection::Clock::time_point Connection::timeout_deadline() const noexcept { return after(timeout_); }

void Connection::fail(IoFailure failure, const IoStatus& status, Phase phase, std::string_view operation) {
  broken_ = true;
  throw_io_error(failure, status.error, status.detail, phase, endpoint_, operation);
}

bool Connection::has_buffered_input() const noexcept {
  if (reader_ && reader_->len > reader_->pos) return true;
  return transport_ && transport_->has_buffered_input();
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
  // Abandoned replies may arrive at any time: bytes are expected. A dead
  // socket then shows up as a failed read.
  if (discard_ > 0) return false;
  if (has_buffered_input()) return true;  // unread reply bytes
  pollfd probe{transport_->fd(), POLLIN | POLLRDHUP, 0};
  const int n = ::poll(&probe, 1, 0);
  return n != 0;  // readable, hung up, or poll itself failed: not to be trusted
}

void Connection::ensure_connected() {
  if (transport_ && !broken_ && (owes_replies() || !stale())) return;
  open(false);
}

bool Connection::ensure_connected_by(Clock::time_point deadline) {
  if (transport_ && !broken_ && (owes_replies() || !stale())) return true;
  if (deadline >= after(options_.connect_timeout)) {
    open(false);
    return true;
  }
  try {
    open(false, deadline);
  } catch (const ConnectError&) {
    if (Clock::now() >= deadline) return false;  // the caller's deadline, not the server, ended it
    throw;
  }
  return true;
}

void Connection::open(bool keep_queued, Clock::time_point connect_deadline) {
  transport_.reset();
  reader_.reset();
  broken_ = true;  // until connected
  in_flight_ = 0;
  discard_ = 0;
  used_ = false;
  handshake_replies_ = 0;
  std::string queued;
  if (keep_queued) {
    // Resent as they are, ASKING prefixes included: which replies are
    // ASKING's stays as recorded (cleared, the caller read ASKING's +OK as
    // its command's reply; found by review, session 18).
    queued = std::move(out_);
  } else {
    queued_ = 0;  // requests queued for the broken socket are not replayed
    asked_.clear();  // no reply of the old socket is owed any more
    asked_read_ = 0;
  }
  out_.clear();
  try {
    transport_ = open_transport(options_, options_.unix_path.empty() ? options_.host : std::string(), options_.port,
                                std::min(after(options_.connect_timeout), connect_deadline), endpoint_);
  } catch (...) {
    queued_ = 0;
    throw;
  }
  reader_.reset(redisReaderCreate());
  if (!reader_) {
    transport_.reset();
    queued_ = 0;
    throw ConnectError("connect on " + endpoint_ + ": cannot allocate a reply reader");
  }
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

bool Connection::pump_input() noexcept {
  if (!transport_ || !reader_) return false;
  // Not zeroed: only the bytes read are fed to the reader (zeroing 16 KiB
  // per read was the largest user-space cost of a lock cycle in callgrind).
  std::array<char, 16384> buffer;
  while (true) {
    const IoStatus status = transport_->read_some(buffer.data(), buffer.size());
    if (status.bytes > 0) {
      if (redisReaderFeed(reader_.get(), buffer.data(), status.bytes) != REDIS_OK) break;
      // A short read emptied the socket; TLS may still hold a record.
      if (status.bytes < buffer.size() && !transport_->has_buffered_input()) return true;
      continue;
    }
    if (status.want != Want::nothing && !status.failed() && !status.closed) return true;
    break;  // EOF or an error
  }
  broken_ = true;
  return false;
}

bool Connection::take_buffered_reply(ReplyPtr& reply) noexcept {
  reply.reset();
  if (!reader_) return false;
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
    broken_ = true;
    return false;
  }
  reply.reset(static_cast<redisReply*>(raw));
  return true;
}

ReplyPtr Connection::next_reply(const Clock::time_point* deadline, Phase phase, std::string_view operation, bool soft) {
  const Clock::time_point until = deadline != nullptr ? *deadline : timeout_deadline();
  std::array<char, 16384> buffer;  // not zeroed: see pump_input
  bool first_read = true;
  while (true) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK)
      fail(IoFailure::protocol, IoStatus{.detail = reader_->errstr}, phase, operation);
    if (raw != nullptr) return ReplyPtr(static_cast<redisReply*>(raw));
    // The socket-timeout path (most calls) waits inside one blocking read;
    // a caller's deadline is waited for with poll below. A reply in pieces
    // waits for the rest within what is left of the socket timeout, not a
    // whole one per piece (found by review, session 18); the first read
    // keeps the socket's timeout as set (no system call to change it).
    std::chrono::milliseconds wait = timeout_;
    if (deadline == nullptr && !first_read && timeout_.count() > 0) {
      wait = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      if (wait.count() <= 0) fail(IoFailure::timeout, IoStatus{.want = Want::read}, phase, operation);
    }
    first_read = false;
    const IoStatus status = deadline == nullptr ? transport_->read_within(buffer.data(), buffer.size(), wait)
                                                : transport_->read_some(buffer.data(), buffer.size());
    if (status.bytes > 0) {
      if (redisReaderFeed(reader_.get(), buffer.data(), status.bytes) != REDIS_OK)
        fail(IoFailure::protocol, IoStatus{.detail = reader_->errstr}, phase, operation);
      continue;
    }
    // A TLS server closes (or resets) a plaintext client's connection at
    // its first bytes: say so rather than just "closed".
    const bool plaintext_handshake = handshake_replies_ > 0 && !options_.tls.enabled;
    if (status.closed) {
      fail(IoFailure::eof,
           plaintext_handshake ? IoStatus{.detail = "during the handshake: a TLS port behind redis://? use rediss://"}
                               : status,
           phase, operation);
    }
    if (plaintext_handshake && status.error == ECONNRESET) {
      fail(IoFailure::io, IoStatus{.detail = "reset during the handshake: a TLS port behind redis://? use rediss://"},
           phase, operation);
    }
    if (status.failed()) fail(IoFailure::io, status, phase, operation);
    if (deadline == nullptr) fail(IoFailure::timeout, status, phase, operation);
    // Past the deadline we still looked once (above): a reply that arrived
    // while we waited on a slower node is sitting in the socket buffer.
    // The reply is still owed: this connection's stream is out of step.
    if (!wait_ready(*transport_, status.want, until)) {
      if (soft) return nullptr;
      fail(IoFailure::timeout, status, phase, operation);
    }
  }
}

// Reads and checks the handshake's replies. Requests written behind the
// handshake make an I/O failure here ambiguous (they may have run), so it
// maps as any command's; without them nothing was sent (ConnectError).
bool Connection::finish_handshake(const Clock::time_point* deadline, std::string_view caller, bool soft) {
  if (handshake_replies_ == 0) return true;
  // Names both: "SET (connection handshake: HELLO with AUTH)".
  const std::string operation = std::string(caller) + (options_.password.empty()
                                                           ? " (connection handshake: HELLO)"
                                                           : " (connection handshake: HELLO with AUTH)");
  const Phase phase = in_flight_ > 0 ? Phase::command : Phase::connect;
  // Each reply is checked as it comes (HELLO, then SELECT when db != 0), so
  // a soft read can stop between them and go on later.
  while (handshake_replies_ > 0) {
    const bool hello = handshake_replies_ == (options_.db != 0 ? 2 : 1);
    ReplyPtr reply = next_reply(deadline, phase, operation, soft);
    if (!reply) return false;  // soft: not in by the deadline
    --handshake_replies_;
    try {
      if (hello) check_hello_reply(*reply, endpoint_, operation, role_);
      else check_reply(*reply, endpoint_, "SELECT " + std::to_string(options_.db));
    } catch (...) {
      broken_ = true;  // the requests behind it are answered by errors, or unknown
      throw;
    }
  }
  return true;
}

void Connection::complete_handshake() {
  flush("connect");
  finish_handshake(nullptr, "connect");
}

void Connection::append(std::span<const std::string_view> args) {
  if (asking_) {
    const bool prefix = prefixer_.needs_asking(args);
    if (prefix) {
      static constexpr std::array<std::string_view, 1> kAsking{"ASKING"};
      append_resp(out_, kAsking);
      ++queued_;
    }
    asked_.push_back(prefix);
  }
  append_resp(out_, args);
  ++queued_;
}

void Connection::set_asking(bool on) noexcept {
  asking_ = on;
  prefixer_ = AskingPrefixer{};
  asked_.clear();
  asked_read_ = 0;
}

bool Connection::skip_asking(const Clock::time_point* deadline, std::string_view operation, bool soft) {
  if (asked_read_ >= asked_.size()) return true;
  if (asked_[asked_read_]) {
    // +OK, or an error the command's own reply will explain.
    if (!next_reply(deadline, Phase::command, operation, soft)) return false;  // soft: not in yet
    got_reply();
  }
  ++asked_read_;
  return true;
}

std::size_t Connection::send_buffer(IoStatus* failure) {
  const Clock::time_point until = timeout_deadline();
  std::size_t sent = 0;
  while (sent < out_.size()) {
    const IoStatus status = transport_->write_some(out_.data() + sent, out_.size() - sent);
    if (status.bytes > 0) {
      sent += status.bytes;
      continue;
    }
    if (status.failed() || status.closed) {
      *failure = status;
      break;
    }
    if (!wait_ready(*transport_, status.want, until)) {
      *failure = IoStatus{.error = ETIMEDOUT};
      break;
    }
  }
  return sent;
}

void Connection::flush(std::string_view operation) {
  if (out_.empty()) return;
  IoStatus failure;
  std::size_t sent = send_buffer(&failure);
  if (sent == 0 && used_ && in_flight_ == 0) {
    // Not a byte left, on a socket that worked before and owes nothing: it
    // went stale after the idle check (or within kIdleCheckAfter). The
    // requests cannot have reached the server: once, send them on a fresh
    // socket (behind its handshake).
    open(true);
    failure = IoStatus{};
    sent = send_buffer(&failure);
  }
  if (sent == 0 && in_flight_ == 0) {
    // Still nothing sent, on a fresh socket: nothing reached the server.
    out_.clear();
    queued_ = 0;
    fail(IoFailure::io, failure, Phase::connect, operation);
  }
  if (sent != out_.size()) {
    out_.clear();
    fail(IoFailure::io, failure, Phase::command, operation);
  }
  in_flight_ += queued_;
  queued_ = 0;
  used_ = true;
  out_.clear();
  if (out_.capacity() > (std::size_t{1} << 20)) out_ = std::string();  // no MBs kept after a huge request
}

bool Connection::abandon_replies() noexcept {
  if (queued_ != 0 || discard_ + in_flight_ > kMaxAbandoned) {
    broken_ = true;
    return false;
  }
  discard_ += in_flight_;
  in_flight_ = 0;
  return true;
}

bool Connection::drop_arrived_abandoned() noexcept {
  if (discard_ == 0) return true;
  if (!pump_input()) return false;
  while (discard_ > 0) {
    ReplyPtr reply;
    if (!take_buffered_reply(reply)) return false;
    if (!reply) break;
    --discard_;
  }
  return true;
}

bool Connection::skip_abandoned(const Clock::time_point* deadline, std::string_view operation, bool soft) {
  while (discard_ > 0) {
    if (!next_reply(deadline, Phase::command, operation, soft)) return false;  // soft: not in yet
    --discard_;
  }
  return true;
}

void Connection::got_reply() noexcept {
  if (in_flight_ > 0) --in_flight_;
}

ReplyPtr Connection::read_reply_until(Clock::time_point deadline, std::string_view operation) {
  flush(operation);
  finish_handshake(&deadline, operation);
  skip_abandoned(&deadline, operation);
  skip_asking(&deadline, operation);
  ReplyPtr reply = next_reply(&deadline, Phase::command, operation);
  got_reply();
  return reply;
}

ReplyPtr Connection::read_reply_by(Clock::time_point deadline, std::string_view operation, bool* deadline_first) {
  const bool by_deadline = deadline < timeout_deadline();
  if (deadline_first != nullptr) *deadline_first = by_deadline;
  return by_deadline ? read_reply_until(deadline, operation) : read_reply(operation);
}

ReplyPtr Connection::read_reply_before(Clock::time_point deadline, std::string_view operation) {
  flush(operation);
  // Every read soft, the handshake's too: a fresh connection's HELLO that
  // misses a short deadline must not break it under the other requests.
  if (!finish_handshake(&deadline, operation, true) || !skip_abandoned(&deadline, operation, true) ||
      !skip_asking(&deadline, operation, true))
    return nullptr;
  ReplyPtr reply = next_reply(&deadline, Phase::command, operation, true);
  if (reply) got_reply();
  return reply;
}

ReplyPtr Connection::read_reply(std::string_view operation) {
  flush(operation);  // hiredis then has nothing to write
  finish_handshake(nullptr, operation);
  skip_abandoned(nullptr, operation);
  skip_asking(nullptr, operation);
  ReplyPtr reply = next_reply(nullptr, Phase::command, operation);
  got_reply();
  return reply;
}

ReplyPtr Connection::command(std::span<const std::string_view> args, std::string_view operation) {
  ensure_connected();
  append(args);
  return read_reply(operation);
}

void Connection::set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

void Connection::restore_timeout() { set_timeout(options_.socket_timeout); }

}  // namespace lockon::detail
