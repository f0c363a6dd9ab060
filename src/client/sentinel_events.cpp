#include "client/sentinel_events.hpp"

#include <charconv>
#include <string>
#include <vector>

namespace lockon::detail {
namespace {

std::string_view string_of(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_STRING) return {};
  return {reply.str, reply.len};
}

std::vector<std::string_view> words_of(std::string_view text) {
  std::vector<std::string_view> words;
  while (!text.empty()) {
    const auto space = text.find(' ');
    if (space != 0) words.push_back(text.substr(0, space));
    if (space == std::string_view::npos) break;
    text.remove_prefix(space + 1);
  }
  return words;
}

std::optional<NodeAddress> address_of(std::string_view host, std::string_view port_text) {
  int port = 0;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port <= 0 || port > 65535 ||
      host.empty())
    return std::nullopt;
  return NodeAddress{std::string(host), port};
}

}  // namespace

std::optional<SentinelNews> read_sentinel_news(const redisReply& message, std::string_view name) {
  if (message.type != REDIS_REPLY_ARRAY || message.elements != 3) return std::nullopt;
  if (string_of(*message.element[0]) != "message") return std::nullopt;
  const std::string_view channel = string_of(*message.element[1]);
  const std::vector<std::string_view> words = words_of(string_of(*message.element[2]));
  if (channel == "+switch-master") {
    // "<name> <old ip> <old port> <new ip> <new port>"
    if (words.size() != 5 || words[0] != name) return std::nullopt;
    auto address = address_of(words[3], words[4]);
    if (!address) return std::nullopt;
    return SentinelNews{std::move(address), std::nullopt};
  }
  if (channel == "+promoted-slave" || channel == "+failover-state-wait-promotion") {
    // "slave <ip:port> <ip> <port> @ <name> <master ip> <master port>"
    if (words.size() != 8 || words[0] != "slave" || words[4] != "@" || words[5] != name) return std::nullopt;
    auto address = address_of(words[2], words[3]);
    if (!address) return std::nullopt;
    if (channel == "+promoted-slave") return SentinelNews{std::move(address), std::nullopt};
    return SentinelNews{std::nullopt, std::move(address)};
  }
  if (channel == "+failover-state-reconf-slaves") {
    // "master <name> <ip> <port>": the old master; the sender names the new one.
    if (words.size() != 4 || words[0] != "master" || words[1] != name) return std::nullopt;
    return SentinelNews{};
  }
  return std::nullopt;
}

}  // namespace lockon::detail
