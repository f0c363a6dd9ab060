// Internal side of lockon/diagnostics.hpp.
#pragma once

#include <string_view>

namespace lockon::detail {

/// Reports `message` through the warning handler the first time `topic` is
/// seen in this process; later calls with the same topic do nothing.
/// Never throws, never blocks on I/O.
void warn_once(std::string_view topic, std::string_view message) noexcept;

/// Whether `topic` was already reported (for tests and for callers that
/// skip building an expensive message).
bool warned(std::string_view topic) noexcept;

}  // namespace lockon::detail
