#include "client/cluster_map.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace lockon::detail {
namespace {

std::string_view text_of(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS) return {reply.str, reply.len};
  return {};
}

// A field of a RESP2 flat map (CLUSTER SHARDS answers maps as arrays).
const redisReply* field(const redisReply& map, std::string_view name) {
  if (map.type != REDIS_REPLY_ARRAY) return nullptr;
  for (std::size_t i = 0; i + 1 < map.elements; i += 2)
    if (text_of(*map.element[i]) == name) return map.element[i + 1];
  return nullptr;
}

long long integer_of(const redisReply* reply) {
  if (reply == nullptr) return -1;
  if (reply->type == REDIS_REPLY_INTEGER) return reply->integer;
  const std::string_view text = text_of(*reply);
  long long value = -1;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// An announced host: "" or "?" mean "the address you reached me at".
std::string host_or(std::string_view announced, const NodeAddress& asked) {
  if (announced.empty() || announced == "?") return asked.host;
  return std::string(announced);
}

}  // namespace

std::vector<SlotOwner> parse_cluster_shards(const redisReply& reply, const NodeAddress& from, bool tls) {
  std::vector<SlotOwner> owners;
  if (reply.type != REDIS_REPLY_ARRAY) return owners;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& shard = *reply.element[i];
    const redisReply* slots = field(shard, "slots");
    const redisReply* nodes = field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr || nodes->type != REDIS_REPLY_ARRAY) continue;
    std::optional<NodeAddress> master;
    for (std::size_t n = 0; n < nodes->elements; ++n) {
      const redisReply& node = *nodes->element[n];
      const redisReply* role = field(node, "role");
      const redisReply* health = field(node, "health");
      if (role == nullptr || text_of(*role) != "master") continue;
      if (health != nullptr && text_of(*health) != "online") continue;
      long long port = integer_of(field(node, tls ? "tls-port" : "port"));
      if (port <= 0) port = integer_of(field(node, "port"));
      const redisReply* endpoint = field(node, "endpoint");
      const redisReply* ip = field(node, "ip");
      std::string_view announced = endpoint != nullptr ? text_of(*endpoint) : std::string_view();
      if ((announced.empty() || announced == "?") && ip != nullptr) announced = text_of(*ip);
      const std::string host = host_or(announced, from);
      if (port > 0 && port <= 65535) master = NodeAddress{host, static_cast<int>(port)};
    }
    if (!master || slots->type != REDIS_REPLY_ARRAY) continue;
    for (std::size_t s = 0; s + 1 < slots->elements; s += 2)
      owners.push_back({static_cast<int>(integer_of(slots->element[s])),
                        static_cast<int>(integer_of(slots->element[s + 1])), *master});
  }
  return owners;
}

std::vector<SlotOwner> parse_cluster_slots(const redisReply& reply, const NodeAddress& from) {
  std::vector<SlotOwner> owners;
  if (reply.type != REDIS_REPLY_ARRAY) return owners;
  for (std::size_t i = 0; i < reply.elements; ++i) {
    const redisReply& range = *reply.element[i];
    if (range.type != REDIS_REPLY_ARRAY || range.elements < 3) continue;
    const redisReply& master = *range.element[2];
    if (master.type != REDIS_REPLY_ARRAY || master.elements < 2) continue;
    const long long port = integer_of(master.element[1]);
    if (port <= 0 || port > 65535) continue;
    owners.push_back({static_cast<int>(integer_of(range.element[0])), static_cast<int>(integer_of(range.element[1])),
                      NodeAddress{host_or(text_of(*master.element[0]), from), static_cast<int>(port)}});
  }
  return owners;
}

std::vector<NodeAddress> map_candidates(const std::vector<NodeAddress>& known, const std::vector<NodeAddress>& seeds,
                                        const std::set<std::string>& suspects) {
  std::vector<NodeAddress> all = known;
  for (const NodeAddress& seed : seeds)
    if (std::find(all.begin(), all.end(), seed) == all.end()) all.push_back(seed);
  std::stable_partition(all.begin(), all.end(),
                        [&](const NodeAddress& node) { return suspects.count(address_text(node)) == 0; });
  return all;
}

}  // namespace lockon::detail
