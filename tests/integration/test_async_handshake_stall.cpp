// integration/test_async_handshake_stall.cpp — AsyncLock's first request
// on a fresh connection goes out in one write with the handshake (HELLO).
// The server is stalled: the handshake gets no answer, the connection
// fails. The request was written, and the server runs it when it wakes
// (the socket's bytes are read before its end), so it must be reported as
// an unknown outcome (TimeoutError) and cleaned up after — it was a
// ConnectError ("nothing was sent"), and the won key stayed held for the
// lease (found by review, session 18).
#include <gtest/gtest.h>

#include <asio/io_context.hpp>

#include <chrono>
#include <string>
#include <thread>

#include "integration/async_support.hpp"
#include "lockon/async.hpp"
#include "lockon/lockon.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

TEST(AsyncHandshakeStall, ARequestWrittenBehindAnUnansweredHandshakeIsCleanedUp) {
  RedisServer own;
  asio::io_context io;
  AsyncClient client(io.get_executor(), own.url() + "?connect_timeout=200&socket_timeout=200");
  const std::string name = "handshake-stall:lock";
  own.pause();  // the kernel still accepts the connection; nobody answers
  AsyncLock lock(client, name, LockOptions{.ttl = 20s});
  std::string error;
  bool nothing_sent = false;
  ASSERT_TRUE(run_on(io, [&]() -> asio::awaitable<void> {
    try {
      co_await lock.async_try_lock();
    } catch (const ConnectError& e) {
      nothing_sent = true;
      error = e.what();
    } catch (const Error& e) {
      error = e.what();
    }
  }, 10s));
  own.resume();
  EXPECT_FALSE(error.empty()) << "acquired on a stalled server";
  EXPECT_FALSE(nothing_sent) << "a written request reported as never sent: " << error;
  // The SET ran once the server woke; the clean-up passes the key on.
  bool freed = false;
  for (int i = 0; i < 60 && !freed; ++i) {
    drain(io, 50ms);
    freed = own.command({"EXISTS", name}).integer == 0;
    if (!freed) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(freed) << "the key stayed held (PTTL " << own.command({"PTTL", name}).integer << " ms)";
}

}  // namespace
}  // namespace lockon::test
