#include "client/sentinel_resolution.hpp"

#include <cstdlib>

namespace lockon::detail {

namespace {

std::string_view text_of(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_ERROR)
    return {reply.str, reply.len};
  return {};
}

}  // namespace

// Options for one sentinel: its address, the sentinel credentials, db 0.
ConnectionOptions sentinel_options(const ConnectionOptions& base, const NodeAddress& address) {
  ConnectionOptions out = base;
  out.deployment = Deployment::standalone;
  out.seeds.clear();
  out.host = address.host;
  out.port = address.port;
  out.unix_path.clear();
  out.db = 0;
  out.user = base.sentinel_user;
  out.password = base.sentinel_password;
  return out;
}

// Options for the master at `host:port`: the URL's credentials and db.
ConnectionOptions master_options(const ConnectionOptions& base, std::string host, int port) {
  ConnectionOptions out = base;
  out.deployment = Deployment::standalone;
  out.seeds.clear();
  out.host = std::move(host);
  out.port = port;
  out.unix_path.clear();
  return out;
}

ConnectionOptions candidate_probe_options(const ConnectionOptions& base, const NodeAddress& candidate) {
  ConnectionOptions out = master_options(base, candidate.host, candidate.port);
  constexpr auto kProbeBound = std::chrono::milliseconds(250);
  for (auto* timeout : {&out.connect_timeout, &out.socket_timeout})
    if (timeout->count() <= 0 || *timeout > kProbeBound) *timeout = kProbeBound;
  return out;
}

std::vector<NodeAddress> sentinels_of(const ConnectionOptions& options) {
  if (!options.seeds.empty()) return options.seeds;
  return {NodeAddress{options.host, options.port}};
}

MasterAddressAnswer read_master_address(const redisReply& reply) {
  MasterAddressAnswer answer;
  if (reply.type == REDIS_REPLY_NIL) {
    answer.unknown = true;
  } else if (reply.type == REDIS_REPLY_ERROR) {
    answer.problem = scrub_server_error(text_of(reply).substr(0, 120));
  } else if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2) {
    answer.problem = "unexpected reply";
  } else {
    answer.address = NodeAddress{std::string(text_of(*reply.element[0])),
                                 std::atoi(std::string(text_of(*reply.element[1])).c_str())};
  }
  return answer;
}

bool role_is_master(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
         text_of(*reply->element[0]) == "master";
}

namespace {

std::chrono::milliseconds bounded(std::chrono::milliseconds timeout) noexcept {
  return timeout.count() > 0 ? timeout : std::chrono::milliseconds(5000);
}

}  // namespace

ResolutionBounds resolution_bounds(const ConnectionOptions& options) noexcept {
  const auto step = bounded(options.connect_timeout) + bounded(options.socket_timeout);
  return {step, 2 * step + std::chrono::milliseconds(100)};
}

ConnectionOptions step_bounded(ConnectionOptions options) noexcept {
  options.connect_timeout = bounded(options.connect_timeout);
  options.socket_timeout = bounded(options.socket_timeout);
  return options;
}

}  // namespace lockon::detail
