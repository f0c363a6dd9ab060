// Commands a caller may not send through Client::command/pipeline or
// AsyncClient::async_command: they change the session of a connection that
// lockon shares (the pool, the automatic pipeline) or make it answer other
// than once per request. SELECT moved every later lock of that connection
// to another database (two holders across clients); SUBSCRIBE, MONITOR and
// CLIENT REPLY put the reply stream out of step; a MULTI left open made the
// next lock request answer +QUEUED (found by review, session 18).
#pragma once

#include <span>
#include <string_view>

namespace lockon::detail {

/// Throws ConfigError naming the command when `args` (one command) may not
/// be sent on a shared connection. A pipeline may hold MULTI ... EXEC and
/// WATCH ... EXEC when balanced: see check_shareable_pipeline().
void check_shareable_command(std::span<const std::string_view> args, std::string_view where);

/// The same for every command of a pipeline, except that a transaction
/// (MULTI, WATCH, UNWATCH, EXEC, DISCARD) is allowed when the pipeline
/// closes it: no MULTI or WATCH left open at its end, no nested MULTI.
void check_shareable_pipeline(std::span<const std::span<const std::string_view>> commands, std::string_view where);

}  // namespace lockon::detail
