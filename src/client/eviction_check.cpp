#include "client/eviction_check.hpp"

#include <chrono>

#include "client/client_impl.hpp"
#include "client/hiredis_handles.hpp"
#include "common/diagnostics.hpp"

namespace lockon::detail {

namespace {
constexpr std::chrono::milliseconds kCheckTimeout{300};
}  // namespace

std::string eviction_warning(std::string_view endpoint, std::string_view maxmemory, std::string_view policy) {
  if (maxmemory.empty() || maxmemory == "0" || policy.empty() || policy == "noeviction") return {};
  return "server " + std::string(endpoint) + " may evict keys when full (maxmemory " + std::string(maxmemory) +
         " bytes, maxmemory-policy " + std::string(policy) +
         "): a held lock's key can be evicted, and another client can then take the lock while its holder "
         "still runs (the holder is told at its next renewal). Use maxmemory-policy noeviction on lock servers.";
}

std::string eviction_warning(std::string_view endpoint, const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY) return {};  // NOPERM, renamed or disabled CONFIG: no check
  std::string_view maxmemory, policy;
  for (std::size_t i = 0; i + 1 < reply.elements; i += 2) {
    const redisReply* name = reply.element[i];
    const redisReply* value = reply.element[i + 1];
    if (name->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING) continue;
    const std::string_view field(name->str, name->len);
    if (field == "maxmemory") maxmemory = std::string_view(value->str, value->len);
    else if (field == "maxmemory-policy") policy = std::string_view(value->str, value->len);
  }
  return eviction_warning(endpoint, maxmemory, policy);
}

void check_eviction_policy(ClientImpl& client, const std::string& key) noexcept {
  try {
    const auto node = client.node_for(key);
    if (warned("eviction:" + node->endpoint())) return;
    auto connection = node->pool().borrow();
    connection->ensure_connected();
    // Bounded well below any lease: the renewals of this server wait behind
    // it (a server that does not answer in time breaks this connection only).
    connection->append(kEvictionConfigGet);
    const ReplyPtr reply =
        connection->read_reply_until(std::chrono::steady_clock::now() + kCheckTimeout, "CONFIG GET maxmemory");
    const std::string message = eviction_warning(node->endpoint(), *reply);
    if (!message.empty()) warn_once("eviction:" + node->endpoint(), message);
  } catch (...) {
    // Unreachable or anything else: renewals will say what matters.
  }
}

}  // namespace lockon::detail
