// Internal to the async connection (async_connection.cpp, async_connection_io.cpp):
// one request in flight, the error mapping it captures, and how it is woken.
#pragma once

#include <asio/steady_timer.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>
#include <vector>

#include "async/async_connection.hpp"
#include "client/error_map.hpp"

namespace lockon::detail {

inline constexpr std::size_t kAsyncReadChunk = 16 * 1024;
enum class Handshake { none, hello, select };

// The one mapping (error_map), captured for the requests it fails.
inline std::exception_ptr async_io_error(IoFailure failure, std::string_view cause, std::string_view endpoint,
                                         std::string_view operation) {
  try {
    throw_io_error(failure, 0, cause, Phase::command, endpoint, operation);
  } catch (...) {
    return std::current_exception();
  }
}

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
  // Or, on one thread with no deadline, the awaiting coroutine's handler
  // itself: the read loop resumes it in place (see resume_ready()).
  struct Waiter {
    virtual ~Waiter() = default;
    virtual void complete(asio::error_code ec) = 0;
  };
  template <class Handler>
  struct WaiterOf final : Waiter {
    explicit WaiterOf(Handler h) : handler(std::move(h)) {}
    void complete(asio::error_code ec) override {
      Handler h = std::move(handler);
      std::move(h)(ec);
    }
    Handler handler;
  };
  std::unique_ptr<Waiter> waiter;
};

// Completes the awaiting coroutine: its stored handler, or its timer.
inline void wake_request(const std::shared_ptr<AsyncConnection::Request>& request, asio::error_code ec) {
  if (!request->waiter) return;
  auto waiter = std::move(request->waiter);
  waiter->complete(ec);
}

}  // namespace lockon::detail
