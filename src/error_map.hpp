// The one place where hiredis failures become lockon exceptions.
#pragma once

#include <string_view>

#include "hiredis_handles.hpp"

namespace lockon::detail {

/// What the connection was doing when it failed; it changes the mapping:
/// during `connect` every failure means "nothing was sent" (ConnectError).
enum class Phase { connect, command };

/// Throws the IoError subclass matching `context->err` (and the errno value
/// captured right after the failing call). `context` may be null when hiredis
/// could not even allocate one. Messages name the endpoint and operation.
[[noreturn]] void throw_context_error(const redisContext* context, int saved_errno, Phase phase,
                                      std::string_view endpoint, std::string_view operation);

/// Throws the ReplyError subclass for an error reply (`-WRONGTYPE ...` →
/// WrongTypeError, `-NOAUTH`/`-WRONGPASS` → AuthError, else ReplyError).
/// Precondition: reply.type == REDIS_REPLY_ERROR.
[[noreturn]] void throw_reply_error(const redisReply& reply, std::string_view endpoint,
                                    std::string_view operation);

/// Convenience: throws if `reply` is an error reply, otherwise returns.
inline void check_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  if (is_error_reply(reply)) throw_reply_error(reply, endpoint, operation);
}

}  // namespace lockon::detail
