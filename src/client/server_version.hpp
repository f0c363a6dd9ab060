// The connection handshake's server check: lockon needs Redis >= 7.0
// (`SET ... GET` arrived in 6.2, `PEXPIRE ... GT` in 7.0). HELLO's reply
// names the version; a server without HELLO is older than 6.0.
#pragma once

#include <optional>
#include <string_view>

#include "client/hiredis_handles.hpp"

namespace lockon::detail {

struct ServerVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;
};

inline constexpr ServerVersion kMinimumServerVersion{7, 0, 0};

/// Parses "7.2.4" (also "7.2", "8"; trailing text after the numbers, as in
/// "7.4.0-rc1", is ignored). Empty if it does not start with a number.
std::optional<ServerVersion> parse_server_version(std::string_view text) noexcept;

/// Whether `version` is at least kMinimumServerVersion.
bool is_supported(const ServerVersion& version) noexcept;

/// The value of field `name` in HELLO's RESP2 reply (a flat array of
/// name, value, name, value...); empty if absent or not a string.
std::string_view hello_field(const redisReply& reply, std::string_view name) noexcept;

/// What a connection expects at the other end. HELLO's "mode" field says
/// what it is: "standalone", "cluster" or "sentinel".
enum class ServerRole {
  data,      ///< a server that holds keys (standalone, master, cluster node)
  sentinel,  ///< a Redis Sentinel (resolving the master, +switch-master)
};

/// Checks HELLO's reply. Throws UnsupportedServerError when the server is
/// older than 7.0, does not know HELLO, or reports no parsable version (the
/// message names `endpoint` and the version it runs); AuthError and the
/// other ReplyError subclasses for any other error reply.
/// A Sentinel where a data server is `expected` is a ConfigError ("... is a
/// Redis Sentinel: connect with a redis-sentinel:// URL"): without it, the
/// first SET or EVALSHA fails with "ERR unknown command" (a wrong URL
/// reported as a server error). `operation` names the failing call in messages.
void check_hello_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation = "HELLO",
                       ServerRole expected = ServerRole::data);

}  // namespace lockon::detail
