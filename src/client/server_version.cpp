#include "client/server_version.hpp"

#include <charconv>
#include <string>

#include "client/error_map.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

std::string needs(std::string_view endpoint, std::string_view what) {
  return "lockon needs Redis >= 7.0; " + std::string(endpoint) + " " + std::string(what);
}

}  // namespace

std::optional<ServerVersion> parse_server_version(std::string_view text) noexcept {
  int parts[3] = {0, 0, 0};
  const char* p = text.data();
  const char* const end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    const auto [next, ec] = std::from_chars(p, end, parts[i]);
    if (ec != std::errc() || parts[i] < 0) {
      if (i == 0) return std::nullopt;
      parts[i] = 0;
      break;
    }
    p = next;
    if (p == end || *p != '.') break;
    ++p;
  }
  return ServerVersion{parts[0], parts[1], parts[2]};
}

bool is_supported(const ServerVersion& version) noexcept {
  const auto& min = kMinimumServerVersion;
  if (version.major != min.major) return version.major > min.major;
  if (version.minor != min.minor) return version.minor > min.minor;
  return version.patch >= min.patch;
}

std::string_view hello_field(const redisReply& reply, std::string_view name) noexcept {
  if (reply.type != REDIS_REPLY_ARRAY) return {};
  for (std::size_t i = 0; i + 1 < reply.elements; i += 2) {
    const redisReply* key = reply.element[i];
    const redisReply* value = reply.element[i + 1];
    if (key->type != REDIS_REPLY_STRING && key->type != REDIS_REPLY_STATUS) continue;
    if (std::string_view(key->str, key->len) != name) continue;
    if (value->type != REDIS_REPLY_STRING && value->type != REDIS_REPLY_STATUS) return {};
    return {value->str, value->len};
  }
  return {};
}

void check_hello_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation,
                       ServerRole expected) {
  if (reply.type == REDIS_REPLY_ERROR) {
    const std::string_view text(reply.str, reply.len);
    // "ERR unknown command 'HELLO'" (Redis < 6.0, or HELLO renamed away).
    if (text.substr(0, 4) == "ERR " && text.find("unknown command") != std::string_view::npos)
      throw UnsupportedServerError(needs(endpoint, "does not know HELLO (Redis < 6.0, or HELLO is renamed)"));
    throw_reply_error(reply, endpoint, operation);
  }
  const std::string_view version = hello_field(reply, "version");
  const auto parsed = parse_server_version(version);
  if (!parsed)
    throw UnsupportedServerError(needs(endpoint, "reports no version in its HELLO reply"));
  if (!is_supported(*parsed)) throw UnsupportedServerError(needs(endpoint, "runs " + std::string(version)));
  if (expected == ServerRole::data && hello_field(reply, "mode") == "sentinel")
    throw ConfigError(std::string(operation) + " on " + std::string(endpoint) +
                      ": this server is a Redis Sentinel, not a data server: connect with a "
                      "redis-sentinel://host:port[,host:port...]#master-name URL, not redis://");
}

}  // namespace lockon::detail
