#include <array>
#include <cctype>
#include <chrono>
#include <span>
#include <vector>

#include "client/session_commands.hpp"
#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "client/routed_pipeline.hpp"
#include "client/slots.hpp"
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
  if (!options.unix_path.empty() && options.tls.enabled && options.deployment == Deployment::standalone)
    throw ConfigError("connection options: TLS over a unix socket is not supported");
  if (options.db < 0) throw ConfigError("connection options: negative database index");
  if (options.connect_timeout.count() < 0 || options.socket_timeout.count() < 0)
    throw ConfigError("connection options: negative timeout");
  // now() + timeout must not overflow the clock's nanoseconds (~292 years):
  // an overflowed deadline lies in the past, and every connect then failed
  // at once (found by review, session 18).
  if (options.connect_timeout > kMaxTimeout || options.socket_timeout > kMaxTimeout)
    throw ConfigError("connection options: timeout over " + std::to_string(kMaxTimeout.count()) +
                      " ms (use 0 for no bound)");
  if (options.reply_spin.count() < 0) throw ConfigError("connection options: negative reply_spin");
  if (!options.user.empty() && options.password.empty())
    throw ConfigError("connection options: ACL user given without a password");
  // Settings that would be ignored without a word: TLS ones with TLS off
  // (the connection goes out in plaintext), a sentinel user without its
  // password (review, session 21).
  const TlsOptions& tls = options.tls;
  if (!tls.enabled && (!tls.cacert.empty() || !tls.cacertdir.empty() || !tls.cert.empty() || !tls.key.empty() ||
                       !tls.sni.empty() || tls.insecure))
    throw ConfigError("connection options: TLS settings given with tls.enabled = false (use rediss://)");
  if (!options.sentinel_user.empty() && options.sentinel_password.empty())
    throw ConfigError("connection options: sentinel user given without a password");
  if (options.deployment == Deployment::sentinel && options.master_name.empty())
    throw ConfigError("connection options: Sentinel needs a master name (#name in the URL)");
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

bool equals_nocase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The key a cluster routes a command by: the first key of EVAL/EVALSHA/
// FCALL (after numkeys), else the second word (the first key of nearly every
// key-bearing command). Commands without keys go wherever their second word
// hashes, which is harmless. Empty: no key (any master).
std::string_view routing_key(std::span<const std::string_view> args) {
  if (args.size() < 2) return {};
  const std::string_view name = args[0];
  for (const char* scripted : {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"}) {
    if (equals_nocase(name, scripted)) return args.size() >= 4 && args[2] != "0" ? args[3] : std::string_view();
  }
  return args[1];
}

// A cluster refused a command whose keys live in different slots: say which
// arguments hash where (never a raw CROSSSLOT).
[[noreturn]] void throw_cross_slot(std::span<const std::string_view> args, std::string_view endpoint) {
  std::string listing;
  for (std::size_t i = 1; i < args.size() && i <= 8; ++i)
    listing += (i > 1 ? ", '" : "'") + std::string(args[i]) + "' (slot " + std::to_string(detail::key_slot(args[i])) + ")";
  throw ReplyError(std::string(args[0]) + " on " + std::string(endpoint) +
                       ": its keys are in different hash slots: " + listing +
                       "; on Redis Cluster the keys of one command must share a hash tag, e.g. {user42}:a, {user42}:b",
                   "CROSSSLOT");
}

Reply run_command(detail::ClientImpl& impl, std::span<const std::string_view> args) {
  detail::check_shareable_command(args, "Client::command");
  const std::string operation = operation_name(args.front());
  std::string endpoint = impl.endpoint();
  detail::ReplyPtr reply;
  const std::string_view key = routing_key(args);
  if (key.empty() && impl.options().deployment == Deployment::cluster) {
    const auto node = impl.any_node();
    auto connection = node->pool().borrow();
    endpoint = node->endpoint();
    reply = connection->command(args, operation);
  } else {
    reply = detail::routed_call(impl, key, std::chrono::steady_clock::time_point::max(),
                                [&](detail::Connection& connection, detail::Node& node) {
                                  endpoint = node.endpoint();
                                  return connection.command(args, operation);
                                });
  }
  if (reply->type == REDIS_REPLY_ERROR && std::string_view(reply->str, reply->len).starts_with("CROSSSLOT"))
    throw_cross_slot(args, endpoint);
  return detail::to_reply(*reply, endpoint, operation);
}

}  // namespace

Client::Client(ConnectionOptions options, PoolOptions pool)
    : impl_(std::make_shared<detail::ClientImpl>(std::move(options), pool)) {}

Client::Client(std::string_view url, PoolOptions pool) : Client(ConnectionOptions::from_url(url), pool) {}

Reply Client::command(std::initializer_list<std::string_view> args) const {
  if (args.size() == 0) throw ConfigError("empty command");
  return run_command(*impl_, std::span<const std::string_view>(args.begin(), args.size()));
}

Reply Client::command(const std::vector<std::string>& args) const {
  if (args.empty()) throw ConfigError("empty command");
  const std::vector<std::string_view> views(args.begin(), args.end());
  return run_command(*impl_, views);
}

std::vector<Reply> Client::pipeline(const std::vector<std::vector<std::string>>& commands) const {
  std::vector<Reply> replies;
  if (commands.empty()) return replies;
  for (const auto& command : commands)
    if (command.empty()) throw ConfigError("empty command in pipeline");
  std::vector<std::vector<std::string_view>> views;
  views.reserve(commands.size());
  for (const auto& command : commands) views.emplace_back(command.begin(), command.end());
  const std::vector<detail::PipelineResends::Command> all(views.begin(), views.end());
  detail::check_shareable_pipeline(all, "Client::pipeline");
  // A cluster runs a pipeline on one master: every command's key must be
  // in the first one's slot (checked here, before anything is sent).
  std::string_view key;
  for (const auto& command : views) {
    const std::string_view mine = routing_key(command);
    if (mine.empty()) continue;
    if (key.empty()) key = mine;
    else if (impl_->options().deployment == Deployment::cluster && detail::key_slot(mine) != detail::key_slot(key))
      throw ConfigError("pipeline on " + impl_->endpoint() + ": keys '" + std::string(key) + "' (slot " +
                        std::to_string(detail::key_slot(key)) + ") and '" + std::string(mine) + "' (slot " +
                        std::to_string(detail::key_slot(mine)) +
                        ") are in different hash slots; on Redis Cluster one pipeline serves one slot (use a hash tag)");
  }
  std::string endpoint = impl_->endpoint();
  // Sends `batch` (all the commands, or on Redis Cluster those a slot
  // migration refused: see routed_pipeline) and reads its replies.
  const auto send = [&](detail::Connection& connection, detail::Node& node,
                        std::span<const detail::PipelineResends::Command> batch) {
    endpoint = node.endpoint();
    connection.ensure_connected();
    for (const auto& command : batch) connection.append(command);
    std::vector<detail::ReplyPtr> raw;
    raw.reserve(batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) raw.push_back(connection.read_reply("pipeline"));
    return raw;
  };
  std::vector<detail::ReplyPtr> raw;
  if (key.empty() && impl_->options().deployment == Deployment::cluster) {
    const auto node = impl_->any_node();
    auto connection = node->pool().borrow();
    raw = send(*connection, *node, all);
  } else {
    // Throws itself when part of the pipeline ran and the rest did not (or
    // may not have): the one place that decides what the caller hears then.
    raw = detail::routed_pipeline(*impl_, key, std::chrono::steady_clock::time_point::max(), all, send);
  }
  replies.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) replies.push_back(detail::to_reply(*raw[i], endpoint, commands[i][0]));
  return replies;
}

void Client::ping() const {
  const Reply reply = command({"PING"});
  if (reply.type() != Reply::Type::status || reply.as_string() != "PONG")
    throw ProtocolError("PING on " + impl_->endpoint() + ": unexpected reply");
}

std::vector<ConnectionOptions> Client::masters() const {
  std::vector<ConnectionOptions> found;
  for (const std::shared_ptr<detail::Node>& node : impl_->topology().masters()) found.push_back(node->options());
  return found;
}

const ConnectionOptions& Client::options() const noexcept { return impl_->options(); }
std::string Client::endpoint() const { return impl_->endpoint(); }

}  // namespace lockon
