// integration/async_support.hpp — running coroutines in tests of the async
// component (lockon_async_tests).
#pragma once

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <chrono>
#include <exception>
#include <filesystem>
#include <utility>

namespace lockon::test {

/// Runs `make()`'s awaitable on `io` until it completes (then stops the
/// loop, leaving background work for the next run), at most `limit`.
/// Returns false on timeout; rethrows the coroutine's exception.
template <class Make>
bool run_on(asio::io_context& io, Make&& make, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  std::exception_ptr error;
  bool done = false;
  io.restart();
  asio::co_spawn(io, std::forward<Make>(make)(), [&](std::exception_ptr e) {
    error = e;
    done = true;
    io.stop();
  });
  io.run_for(limit);
  if (error) std::rethrow_exception(error);
  return done;
}

/// Lets background work (detached releases, clean-ups) run for `duration`.
inline void drain(asio::io_context& io, std::chrono::milliseconds duration) {
  io.restart();
  io.run_for(duration);
}

inline asio::awaitable<void> sleep_for(std::chrono::milliseconds duration) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(duration);
  co_await timer.async_wait(asio::use_awaitable);
}

/// Threads of this process (entries of /proc/self/task).
inline std::size_t thread_count() {
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    static_cast<void>(entry);
    ++n;
  }
  return n;
}

}  // namespace lockon::test
