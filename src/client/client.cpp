#include <array>
#include <vector>

#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"

namespace lockon {

Reply Reply::integer(long long v) {
  Reply r;
  r.type_ = Type::integer;
  r.integer_ = v;
  return r;
}
Reply Reply::string(std::string s) {
  Reply r;
  r.type_ = Type::string;
  r.string_ = std::move(s);
  return r;
}
Reply Reply::status(std::string s) {
  Reply r;
  r.type_ = Type::status;
  r.string_ = std::move(s);
  return r;
}
Reply Reply::array(std::vector<Reply> elements) {
  Reply r;
  r.type_ = Type::array;
  r.elements_ = std::move(elements);
  return r;
}
long long Reply::as_integer() const {
  if (type_ != Type::integer) throw ProtocolError("reply is not an integer");
  return integer_;
}
const std::string& Reply::as_string() const {
  if (type_ != Type::string && type_ != Type::status) throw ProtocolError("reply is not a string");
  return string_;
}
const std::vector<Reply>& Reply::elements() const {
  if (type_ != Type::array) throw ProtocolError("reply is not an array");
  return elements_;
}

namespace detail {

void validate(const ConnectionOptions& options) {
  if (options.unix_path.empty()) {
    if (options.host.empty()) throw ConfigError("connection options: empty host");
    if (options.port < 1 || options.port > 65535)
      throw ConfigError("connection options: port " + std::to_string(options.port) + " is not in 1..65535");
  }
  if (options.db < 0) throw ConfigError("connection options: negative database index");
  if (options.connect_timeout.count() < 0 || options.socket_timeout.count() < 0)
    throw ConfigError("connection options: negative timeout");
  if (!options.user.empty() && options.password.empty())
    throw ConfigError("connection options: ACL user given without a password");
  if (options.tls.cert.empty() != options.tls.key.empty())
    throw ConfigError("connection options: a TLS client certificate needs both cert and key");
  // Until the Sentinel / Cluster topologies land.
  if (options.deployment == Deployment::sentinel)
    throw ConfigError("connection options: Sentinel is not available in this build yet");
  if (options.deployment == Deployment::cluster)
    throw ConfigError("connection options: Cluster is not available in this build yet");
}

ClientImpl::ClientImpl(ConnectionOptions options, PoolOptions pool)
    : options_((validate(options), std::move(options))),
      limits_(pool),
      endpoint_(options_.endpoint()),
      state_([this] { return make_topology(options_, limits_); }) {}

Reply to_reply(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  switch (reply.type) {
    case REDIS_REPLY_ERROR:
      throw_reply_error(reply, endpoint, operation);
    case REDIS_REPLY_INTEGER:
      return Reply::integer(reply.integer);
    case REDIS_REPLY_STRING:
      return Reply::string(std::string(reply.str, reply.len));
    case REDIS_REPLY_STATUS:
      return Reply::status(std::string(reply.str, reply.len));
    case REDIS_REPLY_NIL:
      return Reply::nil();
    case REDIS_REPLY_ARRAY: {
      std::vector<Reply> elements;
      elements.reserve(reply.elements);
      for (std::size_t i = 0; i < reply.elements; ++i)
        elements.push_back(to_reply(*reply.element[i], endpoint, operation));
      return Reply::array(std::move(elements));
    }
    default:
      throw ProtocolError(std::string(operation) + " on " + std::string(endpoint) + ": unexpected reply type");
  }
}

}  // namespace detail

namespace {
std::string operation_name(std::string_view first) { return first.empty() ? std::string("command") : std::string(first); }
}  // namespace

Client::Client(ConnectionOptions options, PoolOptions pool)
    : impl_(std::make_shared<detail::ClientImpl>(std::move(options), pool)) {}

Client::Client(std::string_view url, PoolOptions pool) : Client(ConnectionOptions::from_url(url), pool) {}

Reply Client::command(std::initializer_list<std::string_view> args) const {
  if (args.size() == 0) throw ConfigError("empty command");
  const std::string operation = operation_name(*args.begin());
  auto connection = impl_->pool().borrow();
  detail::ReplyPtr reply = connection->command(std::span<const std::string_view>(args.begin(), args.size()), operation);
  return detail::to_reply(*reply, impl_->endpoint(), operation);
}

Reply Client::command(const std::vector<std::string>& args) const {
  if (args.empty()) throw ConfigError("empty command");
  std::vector<std::string_view> views(args.begin(), args.end());
  const std::string operation = operation_name(views.front());
  auto connection = impl_->pool().borrow();
  detail::ReplyPtr reply = connection->command(views, operation);
  return detail::to_reply(*reply, impl_->endpoint(), operation);
}

std::vector<Reply> Client::pipeline(const std::vector<std::vector<std::string>>& commands) const {
  std::vector<Reply> replies;
  if (commands.empty()) return replies;
  for (const auto& command : commands)
    if (command.empty()) throw ConfigError("empty command in pipeline");
  auto connection = impl_->pool().borrow();
  connection->ensure_connected();
  for (const auto& command : commands) {
    std::vector<std::string_view> views(command.begin(), command.end());
    connection->append(views);
  }
  std::vector<detail::ReplyPtr> raw;
  raw.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) raw.push_back(connection->read_reply("pipeline"));
  replies.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) replies.push_back(detail::to_reply(*raw[i], impl_->endpoint(), commands[i][0]));
  return replies;
}

void Client::ping() const {
  const Reply reply = command({"PING"});
  if (reply.type() != Reply::Type::status || reply.as_string() != "PONG")
    throw ProtocolError("PING on " + impl_->endpoint() + ": unexpected reply");
}

const ConnectionOptions& Client::options() const noexcept { return impl_->options(); }
std::string Client::endpoint() const { return impl_->endpoint(); }

}  // namespace lockon
