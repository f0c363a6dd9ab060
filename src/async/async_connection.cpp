#include "async/async_connection.hpp"

#include <asio/experimental/as_tuple.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <poll.h>

#include <array>

#include "async/async_connect.hpp"
#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "client/script.hpp"
#include "client/server_version.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

namespace {
constexpr std::size_t kReadChunk = 16 * 1024;
enum class Handshake { none, hello, select };

// The one mapping (error_map), captured for the requests it fails.
std::exception_ptr io_error(IoFailure failure, std::string_view cause, std::string_view endpoint,
                            std::string_view operation) {
  try {
    throw_io_error(failure, 0, cause, Phase::command, endpoint, operation);
  } catch (...) {
    return std::current_exception();
  }
}
}  // namespace

struct AsyncConnection::Request {
  explicit Request(const Executor& executor) : signal(executor) {}
  std::size_t expected = 0;
  std::vector<ReplyPtr> replies;
  std::uint64_t first_byte = 0;  // offset of its first byte on the socket
  Handshake handshake = Handshake::none;
  bool abandoned = false;
  bool done = false;
  bool timed_out = false;  // no reply for socket_timeout (check_stall)
  std::exception_ptr error;
  // Wakes the awaiting coroutine (cancel() = "look at done").
  asio::steady_timer signal;
};

bool is_strand(const asio::any_io_executor& executor) noexcept {
  return executor.target<asio::strand<asio::any_io_executor>>() != nullptr ||
         executor.target<asio::strand<asio::io_context::executor_type>>() != nullptr;
}

asio::awaitable<asio::error_code> wait_ready_async(asio::posix::stream_descriptor& descriptor,
                                                  asio::posix::stream_descriptor::wait_type what, bool recheck) {
  if (!recheck) {
    auto [ec] = co_await descriptor.async_wait(what, asio::experimental::as_tuple(asio::use_awaitable));
    co_return ec;
  }
  const auto token = asio::experimental::as_tuple(asio::use_awaitable);
  auto [ec] = co_await asio::async_initiate<decltype(token), void(asio::error_code)>(
      [&descriptor, what](auto handler) {
        descriptor.async_wait(what, std::move(handler));
        // Registered: any later edge reaches it. An edge before the
        // registration may have been consumed by another thread's
        // epoll_wait; poll() (level-triggered) still sees its bytes.
        pollfd probe{descriptor.native_handle(),
                     static_cast<short>(what == asio::posix::stream_descriptor::wait_write ? POLLOUT
                                                                                          : POLLIN | POLLRDHUP),
                     0};
        if (::poll(&probe, 1, 0) > 0) {
          asio::error_code ignored;
          descriptor.cancel(ignored);  // every wait on it looks again: spurious wake-ups are harmless
        }
      },
      token);
  co_return ec;
}

void append_script(std::string& out, const Script& script, bool by_sha, std::span<const std::string_view> keys,
                   std::span<const std::string_view> args) {
  const std::string numkeys = std::to_string(keys.size());
  std::vector<std::string_view> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.push_back(by_sha ? "EVALSHA" : "EVAL");
  argv.push_back(by_sha ? std::string_view(script.sha()) : std::string_view(script.body()));
  argv.push_back(numkeys);
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  append_resp(out, argv);
}

AsyncConnection::AsyncConnection(Executor executor, ConnectionOptions options)
    : executor_(std::move(executor)),
      options_(std::move(options)),
      endpoint_(options_.endpoint()),
      writer_signal_(executor_),
      stall_timer_(executor_),
      recheck_(is_strand(executor_)) {}

AsyncConnection::~AsyncConnection() {
  // Asio must not close the socket: the transport owns it.
  if (descriptor_) {
    asio::error_code ignored;
    descriptor_->cancel(ignored);
    static_cast<void>(descriptor_->release());
  }
}

// An idle request/reply socket has nothing to say: readable bytes, EOF or an
// error mean the server closed it (restart, `timeout`) and the read loop has
// not run since (the loop was busy, or not running). Looked at only after
// kIdleCheckAfter of quiet, as the blocking Connection does, so that a
// request is never sent into a dead socket when that can still be known.
bool AsyncConnection::stale() const noexcept {
  if (state_ != State::up || !fifo_.empty() || !out_.empty() || push_handler_) return false;
  if (Clock::now() - last_progress_ < kIdleCheckAfter) return false;
  pollfd probe{transport_->fd(), POLLIN | POLLRDHUP, 0};
  return ::poll(&probe, 1, 0) != 0 || transport_->has_buffered_input();
}

std::shared_ptr<AsyncConnection::Request> AsyncConnection::enqueue(std::string_view resp, std::size_t replies) {
  if (stale()) {
    // Nothing is owed: nobody sees this failure; the request goes on a fresh socket.
    fail(io_error(IoFailure::eof, {}, endpoint_, "idle check"), false);
  }
  ensure_connected();
  auto request = std::make_shared<Request>(executor_);
  request->expected = replies;
  request->first_byte = queued_bytes_;
  const bool idle = fifo_.empty() && out_.empty() && state_ == State::up && writer_idle_;
  if (replies > 0 && fifo_.empty()) last_progress_ = Clock::now();  // owing starts now
  out_.append(resp);
  queued_bytes_ += resp.size();
  if (replies > 0) {
    fifo_.push_back(request);
    arm_stall_check();
  }
  if (idle) {
    // Nothing in flight: send now rather than through the writer's next turn
    // (the uncontended cycle's latency). With requests in flight, the
    // writer batches whatever queues meanwhile into one write (pipelining).
    const IoStatus status = transport_->write_some(out_.data(), out_.size());
    if (status.bytes > 0) {
      out_.erase(0, status.bytes);
      written_bytes_ += status.bytes;
    }
    if (out_.empty()) return request;
  }
  wake_writer();
  return request;
}

void AsyncConnection::send_unowed(std::string_view resp) { static_cast<void>(enqueue(resp, 0)); }

asio::awaitable<AsyncConnection::Outcome> AsyncConnection::exchange(std::string resp, std::size_t replies,
                                                                    Clock::time_point until,
                                                                    std::string_view operation) {
  auto self = shared_from_this();
  auto request = enqueue(resp, replies);
  // The caller's deadline; the socket timeout is the stall check's (see
  // check_stall): a deep pipeline on a live server is not a timeout.
  request->signal.expires_at(until);
  while (!request->done) {
    auto [ec] = co_await request->signal.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    if (request->done) break;
    if (ec == asio::error::operation_aborted) {
      const auto state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none) {
        request->abandoned = true;  // its replies are read and dropped
        co_return Outcome{Ended::cancelled, {}};
      }
      continue;  // a stray wake-up: look again
    }
    if (Clock::now() < until) continue;
    request->abandoned = true;
    co_return Outcome{Ended::deadline, {}};
  }
  if (request->timed_out) throw_io_error(IoFailure::timeout, 0, {}, Phase::command, endpoint_, operation);
  if (request->error) std::rethrow_exception(request->error);
  co_return Outcome{Ended::replied, std::move(request->replies)};
}

void AsyncConnection::arm_stall_check() {
  if (options_.socket_timeout.count() <= 0) return;
  const auto at = last_progress_ + options_.socket_timeout;
  // Armed for a later moment (e.g. the handshake's bound): re-arm earlier.
  if (stall_armed_ && stall_timer_.expiry() <= at) return;
  stall_armed_ = true;
  const std::uint64_t epoch = ++stall_epoch_;
  stall_timer_.expires_at(at);
  std::weak_ptr<AsyncConnection> weak = weak_from_this();
  stall_timer_.async_wait([weak, epoch](const asio::error_code&) {
    auto self = weak.lock();
    if (self && epoch == self->stall_epoch_) self->check_stall();
  });
}

// Runs while replies are owed. No reply for socket_timeout: the server is
// stalled (or the path to it). Every owed request fails with TimeoutError
// (outcome unknown) and is abandoned — its replies, should they come, are
// still read and dropped, so the connection stays in step and is kept. A
// handshake that got no answer fails the connection instead (ConnectError:
// the server ran nothing behind an unanswered HELLO).
void AsyncConnection::check_stall() noexcept {
  stall_armed_ = false;
  if (fifo_.empty() || state_ == State::down) return;
  const auto now = Clock::now();
  if (now < last_progress_ + options_.socket_timeout) {
    arm_stall_check();
    return;
  }
  if (fifo_.front()->handshake != Handshake::none) {
    try {
      throw_io_error(IoFailure::timeout, ETIMEDOUT, {}, Phase::connect, endpoint_, "connect (handshake)");
    } catch (...) {
      fail(std::current_exception(), true);
    }
    return;
  }
  for (auto& request : fifo_) {
    if (request->done || request->abandoned) continue;
    request->timed_out = true;
    finish(*request);
    request->abandoned = true;
  }
  last_progress_ = now;  // later requests get a full timeout of their own
}

void AsyncConnection::ensure_connected() {
  if (state_ == State::down) start_connect();
}

void AsyncConnection::start_connect() {
  state_ = State::connecting;
  const std::uint64_t generation = ++generation_;
  out_.clear();
  queued_bytes_ = 0;
  written_bytes_ = 0;
  reader_.reset(redisReaderCreate());
  // HELLO 2 (with AUTH) and SELECT go first; callers' requests queue behind.
  const std::string_view user = options_.user.empty() ? std::string_view("default") : std::string_view(options_.user);
  auto hello = std::make_shared<Request>(executor_);
  hello->expected = 1;
  hello->handshake = Handshake::hello;
  if (options_.password.empty()) {
    const std::array<std::string_view, 2> args{"HELLO", "2"};
    append_resp(out_, args);
  } else {
    const std::array<std::string_view, 5> args{"HELLO", "2", "AUTH", user, options_.password};
    append_resp(out_, args);
  }
  fifo_.push_back(hello);
  if (options_.db != 0) {
    const std::string db = std::to_string(options_.db);
    const std::array<std::string_view, 2> args{"SELECT", db};
    auto select = std::make_shared<Request>(executor_);
    select->expected = 1;
    select->handshake = Handshake::select;
    select->first_byte = out_.size();
    append_resp(out_, args);
    fifo_.push_back(select);
  }
  queued_bytes_ = out_.size();
  // The handshake's answer is bounded like any reply, from the connect on
  // (connect_timeout bounds the connect itself).
  last_progress_ = Clock::now() + options_.connect_timeout;
  arm_stall_check();
  asio::co_spawn(executor_, connect_and_run(generation), asio::detached);
}

asio::awaitable<void> AsyncConnection::connect_and_run(std::uint64_t generation) {
  auto self = shared_from_this();
  const auto bound = options_.connect_timeout.count() > 0 ? Clock::now() + options_.connect_timeout
                                                          : Clock::time_point::max();
  std::unique_ptr<Transport> transport;
  std::exception_ptr error;
  try {
    transport = co_await async_open_transport(executor_, options_, bound, endpoint_);
  } catch (...) {
    error = std::current_exception();
  }
  if (generation != generation_) co_return;  // closed meanwhile (the transport closes its socket)
  if (error) {
    fail(error, true);
    co_return;
  }
  transport_ = std::move(transport);
  descriptor_.emplace(executor_, transport_->fd());
  asio::co_spawn(executor_, read_loop(generation), asio::detached);
  asio::co_spawn(executor_, write_loop(generation), asio::detached);
}

void AsyncConnection::wake_writer() noexcept {
  if (writer_idle_) {
    writer_idle_ = false;
    writer_signal_.cancel();
  }
}

asio::awaitable<void> AsyncConnection::write_loop(std::uint64_t generation) {
  auto self = shared_from_this();
  while (generation == generation_) {
    if (out_.empty()) {
      // Requests that arrive before this runs again are written together.
      writer_idle_ = true;
      writer_signal_.expires_at(Clock::time_point::max());
      co_await writer_signal_.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
      continue;
    }
    const IoStatus status = transport_->write_some(out_.data(), out_.size());
    if (status.bytes > 0) {
      out_.erase(0, status.bytes);
      written_bytes_ += status.bytes;
      if (out_.capacity() > (std::size_t{1} << 20) && out_.empty()) out_ = std::string();
      continue;
    }
    if (status.failed() || status.closed) {
      try {
        throw_io_status(status, false, endpoint_, "write");
      } catch (...) {
        fail(std::current_exception(), false);
      }
      co_return;
    }
    const auto wait = status.want == Want::read ? asio::posix::stream_descriptor::wait_read
                                                : asio::posix::stream_descriptor::wait_write;
    co_await wait_ready_async(*descriptor_, wait, recheck_);
  }
}

asio::awaitable<void> AsyncConnection::read_loop(std::uint64_t generation) {
  auto self = shared_from_this();
  std::vector<char> buffer(kReadChunk);
  while (generation == generation_) {
    const IoStatus status = transport_->read_some(buffer.data(), buffer.size());
    if (status.bytes > 0) {
      if (redisReaderFeed(reader_.get(), buffer.data(), status.bytes) != REDIS_OK) {
        fail(io_error(IoFailure::protocol, "unparsable reply", endpoint_, "read"), false);
        co_return;
      }
      while (generation == generation_) {
        void* raw = nullptr;
        if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
          fail(io_error(IoFailure::protocol, reader_->errstr, endpoint_, "read"), false);
          co_return;
        }
        if (raw == nullptr) break;
        on_reply(ReplyPtr(static_cast<redisReply*>(raw)));
      }
      if (generation != generation_) co_return;  // a reply failed the connection (handshake)
      // A short read drained the socket: wait (a TLS record may still be
      // buffered in user space; then read on).
      if (status.bytes == buffer.size() || transport_->has_buffered_input()) continue;
      co_await wait_ready_async(*descriptor_, asio::posix::stream_descriptor::wait_read, recheck_);
      continue;
    }
    if (status.failed() || status.closed) {
      try {
        throw_io_status(status, written_bytes_ == 0, endpoint_, "read");
      } catch (...) {
        fail(std::current_exception(), false);
      }
      co_return;
    }
    const auto wait = status.want == Want::write ? asio::posix::stream_descriptor::wait_write
                                                 : asio::posix::stream_descriptor::wait_read;
    co_await wait_ready_async(*descriptor_, wait, recheck_);
  }
}

void AsyncConnection::on_reply(ReplyPtr reply) {
  last_progress_ = Clock::now();
  if (fifo_.empty()) {
    if (push_handler_) {
      push_handler_(std::move(reply));
      return;
    }
    fail(io_error(IoFailure::protocol, "a reply nobody asked for", endpoint_, "read"), false);
    return;
  }
  auto request = fifo_.front();
  if (request->handshake != Handshake::none) {
    fifo_.pop_front();
    try {
      if (request->handshake == Handshake::hello) {
        check_hello_reply(*reply, endpoint_,
                          options_.password.empty() ? "connection handshake: HELLO"
                                                    : "connection handshake: HELLO with AUTH");
        bool more = false;
        for (const auto& r : fifo_) more = more || r->handshake == Handshake::select;
        if (!more) {
          state_ = State::up;
          if (state_handler_) state_handler_(true, nullptr);
        }
      } else {
        check_reply(*reply, endpoint_, "SELECT " + std::to_string(options_.db));
        state_ = State::up;
        if (state_handler_) state_handler_(true, nullptr);
      }
    } catch (...) {
      fail(std::current_exception(), true);
    }
    return;
  }
  request->replies.push_back(std::move(reply));
  if (request->replies.size() < request->expected) return;
  fifo_.pop_front();
  finish(*request);
}

void AsyncConnection::finish(Request& request) noexcept {
  request.done = true;
  if (!request.abandoned) request.signal.cancel();
}

void AsyncConnection::fail(std::exception_ptr error, bool from_handshake) noexcept {
  if (state_ == State::down) return;
  state_ = State::down;
  ++generation_;
  if (descriptor_) {
    asio::error_code ignored;
    descriptor_->cancel(ignored);
    static_cast<void>(descriptor_->release());
    descriptor_.reset();
  }
  transport_.reset();
  writer_signal_.cancel();
  writer_idle_ = false;
  stall_timer_.cancel();
  stall_armed_ = false;
  ++stall_epoch_;
  auto owed = std::move(fifo_);
  fifo_.clear();
  out_.clear();
  for (auto& request : owed) {
    if (request->handshake != Handshake::none) continue;
    // Not a byte of it written: it certainly did not run.
    if (!from_handshake && request->first_byte >= written_bytes_) {
      try {
        throw ConnectError("request on " + endpoint_ + ": connection lost before it was sent");
      } catch (...) {
        request->error = std::current_exception();
      }
    } else {
      request->error = error;
    }
    finish(*request);
  }
  if (state_handler_) state_handler_(false, error);
}

void AsyncConnection::close() noexcept {
  try {
    fail(std::make_exception_ptr(ClosedError("request on " + endpoint_ + ": the client was closed")), false);
  } catch (...) {
  }
}

}  // namespace lockon::detail
