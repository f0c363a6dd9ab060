#include "client/routed.hpp"

#include <charconv>

namespace lockon::detail {

Redirect redirect_of(std::string_view text) noexcept {
  const std::string_view code = text.substr(0, text.find(' '));
  Redirect redirect;
  if (code == "TRYAGAIN" || code == "CLUSTERDOWN") {
    redirect.kind = RedirectKind::retry;
    return redirect;
  }
  if (code != "MOVED" && code != "ASK") return redirect;
  // "<code> <slot> <host>:<port>"; an empty host means the node's own.
  const auto target_at = text.rfind(' ');
  const std::string_view target = text.substr(target_at + 1);
  const auto colon = target.rfind(':');
  int port = 0;
  if (target_at == std::string_view::npos || colon == std::string_view::npos) return redirect;
  std::from_chars(target.data() + colon + 1, target.data() + target.size(), port);
  if (port <= 0 || port > 65535) return redirect;
  redirect.kind = code == "MOVED" ? RedirectKind::moved : RedirectKind::ask;
  try {
    redirect.target = {std::string(target.substr(0, colon)), port};
  } catch (...) {
    redirect.kind = RedirectKind::retry;
  }
  return redirect;
}

}  // namespace lockon::detail
