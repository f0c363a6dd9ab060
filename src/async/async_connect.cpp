#include "async/async_connect.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/connect.hpp>
#include <asio/experimental/as_tuple.hpp>

#include <cerrno>
#include <cstring>
#include <variant>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using namespace asio::experimental::awaitable_operators;

std::string describe(std::string_view operation, std::string_view endpoint, std::string_view cause) {
  std::string message;
  message.append(operation).append(" on ").append(endpoint).append(": ").append(cause);
  return message;
}

class SocketTransport final : public Transport {
 public:
  SocketTransport(int fd, std::string_view kind) : fd_(fd), kind_(kind) {}
  ~SocketTransport() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const noexcept override { return fd_; }
  IoStatus read_some(char* data, std::size_t size) noexcept override {
    while (true) {
      const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
      if (n > 0) return IoStatus{static_cast<std::size_t>(n)};
      if (n == 0) return IoStatus{0, Want::nothing, true};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus{0, Want::read};
      return IoStatus{0, Want::nothing, false, errno};
    }
  }
  IoStatus write_some(const char* data, std::size_t size) noexcept override {
    while (true) {
      // MSG_NOSIGNAL: a reset peer must not kill the process with SIGPIPE.
      const ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) return IoStatus{static_cast<std::size_t>(n)};
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return IoStatus{0, Want::write};
      return IoStatus{0, Want::nothing, false, n == 0 ? EPIPE : errno};
    }
  }
  std::string_view kind() const noexcept override { return kind_; }

 private:
  int fd_;
  std::string_view kind_;
};

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

}  // namespace

std::unique_ptr<Transport> make_socket_transport(int fd, std::string_view kind) {
  return std::make_unique<SocketTransport>(fd, kind);
}

void throw_io_status(const IoStatus& status, bool nothing_sent, std::string_view endpoint,
                     std::string_view operation) {
  std::string cause;
  if (status.closed) cause = "server closed the connection";
  else if (!status.detail.empty()) cause = "connection broken: " + status.detail;
  else cause = std::string("connection broken: ") + std::strerror(status.error);
  if (nothing_sent) throw ConnectError(describe(operation, endpoint, cause));
  throw ClosedError(describe(operation, endpoint, cause));
}

asio::awaitable<std::unique_ptr<Transport>> async_open_transport(asio::any_io_executor executor,
                                                                 const ConnectionOptions& options,
                                                                 Transport::Clock::time_point deadline,
                                                                 std::string endpoint) {
  if (options.tls.enabled)
    throw ConfigError("connect on " + endpoint + ": TLS is not supported by lockon's async client yet");
  if (!options.unix_path.empty() && options.host.empty()) {
    asio::local::stream_protocol::socket socket(executor);
    const auto ec = co_await bounded(socket, deadline, [&](asio::error_code& out) -> asio::awaitable<void> {
      auto [error] = co_await socket.async_connect(asio::local::stream_protocol::endpoint(options.unix_path),
                                                   asio::experimental::as_tuple(asio::use_awaitable));
      out = error;
    });
    if (ec == asio::error::timed_out) throw ConnectError(describe("connect", endpoint, "connect timed out"));
    if (ec) throw ConnectError(describe("connect", endpoint, "cannot connect: " + ec.message()));
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
  if (ec == asio::error::timed_out) throw ConnectError(describe("connect", endpoint, "connect timed out"));
  if (ec) throw ConnectError(describe("connect", endpoint, "cannot connect: " + ec.message()));
  socket.set_option(asio::ip::tcp::no_delay(true), ec);
  if (options.keepalive) socket.set_option(asio::socket_base::keep_alive(true), ec);
  co_return make_socket_transport(socket.release(), "tcp");
}

}  // namespace lockon::detail
