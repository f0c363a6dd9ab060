// Sentinel for the async front: the master of one monitored set, found
// through the sentinels with async connections (never a blocking call on
// the loop), the counterpart of client/sentinel_topology.*.
//
// Each sentinel in turn (the last one that answered first) is asked
// `SENTINEL GET-MASTER-ADDR-BY-NAME <name>` over a short-lived
// AsyncConnection (sentinel credentials, db 0, TLS as the URL says); the
// address it names is connected to and must answer `ROLE` with "master".
// That probe connection becomes the client's command connection. Each step
// is bounded by connect_timeout + socket_timeout, the whole resolution by
// the same budget as the blocking front.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

#include "async/async_connection.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// The confirmed master's connection (handshaken, ROLE master). `hint`, a
/// master named by failover news, is probed first; then `preferred` is the
/// index of the sentinel asked first, set to the one that answered.
/// Throws ConnectError naming the master and what each sentinel said.
asio::awaitable<std::shared_ptr<AsyncConnection>> async_resolve_master(asio::any_io_executor executor,
                                                                       const ConnectionOptions& options,
                                                                       std::size_t& preferred,
                                                                       std::optional<NodeAddress> hint);

/// Whether the server behind `connection` answers ROLE with "master"
/// before `until` (false: another role, no answer in time, or an error).
asio::awaitable<bool> async_says_master(AsyncConnection& connection, std::chrono::steady_clock::time_point until);

}  // namespace lockon::detail
