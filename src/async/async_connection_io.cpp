// AsyncConnection's I/O: connecting (with the handshake), the write loop that
// sends what callers queued, and the read loop that parses replies. The
// request bookkeeping they feed is in async_connection.cpp.
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

#include <array>
#include <tuple>

#include "async/async_connect.hpp"
#include "async/async_connection.hpp"
#include "async/async_connection_request.hpp"
#include "client/connection.hpp"
#include "client/server_version.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

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
  // Posted, never run inline: co_spawn starts the coroutine at once when
  // called on the executor's thread, and a connect that failed before its
  // first suspension then ran fail() inside enqueue(), before the caller's
  // request was queued; the request then waited forever on a connection
  // that was down (found in session 21 with TLS over a unix socket).
  asio::post(executor_, [self = shared_from_this(), generation] {
    asio::co_spawn(self->executor_, self->connect_and_run(generation), asio::detached);
  });
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
  // Destroyed while its generation is current: the io_context is being torn
  // down with requests owed. Their waiters (coroutine frames that hold this
  // connection) are dropped, as Asio drops every pending handler then, so
  // that no ownership cycle outlives the io_context.
  struct DropWaiters {
    AsyncConnection& connection;
    std::uint64_t generation;
    ~DropWaiters() {
      if (generation != connection.generation_) return;
      for (auto& request : connection.fifo_) request->waiter.reset();
    }
  } drop_waiters{*this, generation};
  std::vector<char> buffer(kAsyncReadChunk);
  while (generation == generation_) {
    const IoStatus status = transport_->read_some(buffer.data(), buffer.size());
    if (status.bytes > 0) {
      if (redisReaderFeed(reader_.get(), buffer.data(), status.bytes) != REDIS_OK) {
        fail(async_io_error(IoFailure::protocol, "unparsable reply", endpoint_, "read"), false);
        co_return;
      }
      deferring_ = true;
      while (generation == generation_) {
        void* raw = nullptr;
        if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
          fail(async_io_error(IoFailure::protocol, reader_->errstr, endpoint_, "read"), false);
          break;
        }
        if (raw == nullptr) break;
        on_reply(ReplyPtr(static_cast<redisReply*>(raw)));
      }
      resume_ready();
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

}  // namespace lockon::detail
