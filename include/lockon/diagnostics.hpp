// lockon/diagnostics.hpp — where lockon reports conditions that are not
// errors of any one call but that an operator must hear about once: a
// missing ACL permission that forces waiters to poll, a server that cannot
// publish wake-ups, a background clean-up that keeps failing.
//
// Each condition ("topic") is reported once per process. Messages name the
// server and the missing permission or cause; they never contain a password
// or a lock token.
#pragma once

#include <functional>
#include <string_view>

namespace lockon {

/// Receives one warning: `topic` is a short stable identifier (e.g.
/// "acl:publish"), `message` a sentence for a human.
using WarningHandler = std::function<void(std::string_view topic, std::string_view message)>;

/// Replaces the warning handler (default: one line "lockon: warning: ..." on
/// stderr). Pass an empty function to silence warnings. Thread-safe; the
/// handler may be called from any lockon thread, and must not throw (an
/// exception from it is swallowed) nor call back into lockon.
void set_warning_handler(WarningHandler handler);

}  // namespace lockon
