// Opening a Transport without blocking the executor (the async front's
// counterpart of open_transport()).
//
// TCP: the host is used as is when it is an IP literal; a name goes through
// Asio's resolver (which resolves on one internal thread per io_context,
// created on first use: a constant, not one per connection or waiter). The
// connect waits on the executor, bounded by connect_timeout. Unix sockets
// likewise. The connected socket is then wrapped in a plain Transport.
//
// TLS: after the TCP connect, the handshake (TlsHandshake, shared with the
// blocking front) is driven step by step on the executor, each wait an
// async_wait on the socket raced against the same deadline.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "client/transport.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// Connects as `options` say before `deadline` (time_point::max(): no bound).
/// Throws ConnectError naming `endpoint` (nothing was sent), TlsError for a
/// failed or timed-out TLS handshake.
asio::awaitable<std::unique_ptr<Transport>> async_open_transport(asio::any_io_executor executor,
                                                                 const ConnectionOptions& options,
                                                                 Transport::Clock::time_point deadline,
                                                                 std::string endpoint);

/// Maps a failed or closed IoStatus through throw_io_error: ConnectError
/// when `nothing_sent`, else ClosedError (EOF, reset) — the outcome of what
/// was sent is unknown. Messages name endpoint and operation.
[[noreturn]] void throw_io_status(const IoStatus& status, bool nothing_sent, std::string_view endpoint,
                                  std::string_view operation);

}  // namespace lockon::detail
