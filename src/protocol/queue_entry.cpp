#include "protocol/queue_entry.hpp"

#include <algorithm>

namespace lockon::detail {

std::string queue_entry(std::string_view subscriber_id, std::string_view waiter_id, std::string_view ttl_ms,
                        std::string_view kind, std::string_view token) {
  std::string entry;
  entry.reserve(subscriber_id.size() + waiter_id.size() + ttl_ms.size() + kind.size() + token.size() + 4);
  for (const std::string_view field : {subscriber_id, waiter_id, ttl_ms, kind}) {
    entry.append(field);
    entry.push_back('|');
  }
  entry.append(token);
  return entry;
}

std::string entry_token(std::string_view entry) {
  std::size_t at = 0;
  for (int field = 0; field < 4; ++field) {
    at = entry.find('|', at);
    if (at == std::string_view::npos) return {};
    ++at;
  }
  return std::string(entry.substr(at));
}

std::string entry_for_subscriber(std::string_view entry, std::string_view subscriber_id) {
  std::string renamed(subscriber_id);
  renamed.append(entry.substr(std::min(entry.find('|'), entry.size())));
  return renamed;
}

}  // namespace lockon::detail
