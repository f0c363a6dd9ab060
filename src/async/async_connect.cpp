#include "async/async_connect.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <cerrno>
#include <cstring>
#include <variant>

#include "async/async_connection.hpp"
#include "client/error_map.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using namespace asio::experimental::awaitable_operators;

// A failed connect through the one mapping (ConnectError: nothing was sent).
[[noreturn]] void throw_connect_error(const asio::error_code& ec, std::string_view endpoint) {
  if (ec == asio::error::timed_out) throw_io_error(IoFailure::timeout, ETIMEDOUT, {}, Phase::connect, endpoint, "connect");
  const bool errno_based = ec.category() == asio::system_category();
  throw_io_error(IoFailure::io, errno_based ? ec.value() : 0, errno_based ? std::string() : ec.message(),
                 Phase::connect, endpoint, "connect");
}

// Races `connect` against the deadline; returns the error (or success).
template <class Socket, class Connect>
asio::awaitable<asio::error_code> bounded(Socket& socket, Transport::Clock::time_point deadline, Connect connect) {
  asio::error_code result;
  if (deadline == Transport::Clock::time_point::max()) {
    co_await connect(result);
    co_return result;
  }
  asio::steady_timer timer(socket.get_executor());
  timer.expires_at(deadline);
  auto winner = co_await (connect(result) || timer.async_wait(asio::use_awaitable));
  if (winner.index() == 1) result = asio::error::timed_out;
  co_return result;
}

// The TLS handshake on the executor: each SSL_connect step runs without
// blocking and the wait for the readiness it asks for is an async_wait
// raced against the deadline, so a slow or silent server never stalls the
// loop. The same TlsHandshake the blocking front drives with poll().
asio::awaitable<std::unique_ptr<Transport>> async_tls_handshake(asio::any_io_executor executor, int fd,
                                                                const ConnectionOptions& options,
                                                                Transport::Clock::time_point deadline,
                                                                const std::string& endpoint) {
  TlsHandshake handshake(fd, options, options.host, endpoint);  // owns fd from here on
  asio::posix::stream_descriptor descriptor(executor, handshake.fd());
  // The handshake owns the socket: Asio must never close it.
  struct Release {
    asio::posix::stream_descriptor& d;
    ~Release() {
      asio::error_code ignored;
      d.cancel(ignored);
      static_cast<void>(d.release());
    }
  } release{descriptor};
  asio::steady_timer timer(executor);
  timer.expires_at(deadline);
  const bool recheck = is_strand(executor);
  for (Want want = handshake.step(); want != Want::nothing; want = handshake.step()) {
    if (Transport::Clock::now() >= deadline) handshake.timed_out();
    const auto wait = want == Want::read ? asio::posix::stream_descriptor::wait_read
                                         : asio::posix::stream_descriptor::wait_write;
    if (deadline == Transport::Clock::time_point::max()) {
      co_await wait_ready_async(descriptor, wait, recheck);
      continue;
    }
    auto winner = co_await (wait_ready_async(descriptor, wait, recheck) ||
                            timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable)));
    if (winner.index() == 1) handshake.timed_out();
  }
  co_return handshake.finish();
}

}  // namespace

void throw_io_status(const IoStatus& status, bool nothing_sent, std::string_view endpoint,
                     std::string_view operation) {
  const IoFailure failure = status.closed ? IoFailure::eof : IoFailure::io;
  throw_io_error(failure, status.error, status.detail, nothing_sent ? Phase::connect : Phase::command, endpoint,
                 operation);
}

asio::awaitable<std::unique_ptr<Transport>> async_open_transport(asio::any_io_executor executor,
                                                                 const ConnectionOptions& options,
                                                                 Transport::Clock::time_point deadline,
                                                                 std::string endpoint) {
  // unix_path alone decides, as for the blocking Connection: options built
  // in code keep host's default, and the header says host and port are then
  // ignored (they were not: review, session 21).
  if (!options.unix_path.empty()) {
    if (options.tls.enabled) throw ConfigError("connect on " + endpoint + ": TLS over a unix socket is not supported");
    asio::local::stream_protocol::socket socket(executor);
    const auto ec = co_await bounded(socket, deadline, [&](asio::error_code& out) -> asio::awaitable<void> {
      auto [error] = co_await socket.async_connect(asio::local::stream_protocol::endpoint(options.unix_path),
                                                   asio::experimental::as_tuple(asio::use_awaitable));
      out = error;
    });
    if (ec) throw_connect_error(ec, endpoint);
    co_return make_socket_transport(socket.release(), "unix");
  }
  asio::ip::tcp::socket socket(executor);
  asio::error_code parse_error;
  const auto address = asio::ip::make_address(options.host, parse_error);
  asio::error_code ec;
  if (!parse_error) {
    const asio::ip::tcp::endpoint target(address, static_cast<unsigned short>(options.port));
    ec = co_await bounded(socket, deadline, [&](asio::error_code& out) -> asio::awaitable<void> {
      auto [error] = co_await socket.async_connect(target, asio::experimental::as_tuple(asio::use_awaitable));
      out = error;
    });
  } else {
    asio::ip::tcp::resolver resolver(executor);
    ec = co_await bounded(socket, deadline, [&](asio::error_code& out) -> asio::awaitable<void> {
      auto [resolve_error, results] = co_await resolver.async_resolve(
          options.host, std::to_string(options.port), asio::experimental::as_tuple(asio::use_awaitable));
      if (resolve_error) {
        out = resolve_error;
        co_return;
      }
      auto [error, chosen] = co_await asio::async_connect(socket, results, asio::experimental::as_tuple(asio::use_awaitable));
      static_cast<void>(chosen);
      out = error;
    });
  }
  if (ec) throw_connect_error(ec, endpoint);
  socket.set_option(asio::ip::tcp::no_delay(true), ec);
  if (options.keepalive) socket.set_option(asio::socket_base::keep_alive(true), ec);
  if (!options.tls.enabled) co_return make_socket_transport(socket.release(), "tcp");
  co_return co_await async_tls_handshake(executor, socket.release(), options, deadline, endpoint);
}

}  // namespace lockon::detail
