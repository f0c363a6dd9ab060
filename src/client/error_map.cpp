#include "client/error_map.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

std::string describe(std::string_view operation, std::string_view endpoint, std::string_view cause) {
  std::string message;
  message.reserve(operation.size() + endpoint.size() + cause.size() + 8);
  message.append(operation).append(" on ").append(endpoint).append(": ").append(cause);
  return message;
}

bool is_timeout_errno(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT || e == EINPROGRESS; }

// Where the server starts echoing a request's arguments, and how far the
// echo runs (to the end of the text, or to the closing quote).
struct Echo {
  std::string_view marker;
  bool to_end;
};
// "ERR unknown command 'SET', with args beginning with: 'K' 'tok' " (Redis
// 7; Redis 6.2 quotes with backquotes and commas: same marker);
// "ERR Error in ACL SETUSER modifier '>password': Syntax error".
constexpr Echo kEchoes[] = {
    {"with args beginning with:", true},
    {"modifier '", false},
};
constexpr std::string_view kWithheld = kArgumentsWithheld;

}  // namespace

std::string scrub_server_error(std::string_view text) {
  std::string out;
  out.reserve(std::min(text.size(), kMaxServerTextBytes) + kWithheld.size() + 4);
  std::size_t i = 0;
  while (i < text.size()) {
    // The earliest echo left in the text.
    std::size_t at = std::string_view::npos;
    const Echo* echo = nullptr;
    for (const Echo& e : kEchoes) {
      const std::size_t found = text.find(e.marker, i);
      if (found < at) {
        at = found;
        echo = &e;
      }
    }
    if (echo == nullptr) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, at + echo->marker.size() - i));
    if (echo->to_end) {
      out.append(" ").append(kWithheld);
      break;
    }
    // The echo ends at the last "': " (the argument may hold quotes); none:
    // it runs to the end.
    out.append(kWithheld);
    const std::size_t close = text.rfind("': ");
    if (close == std::string_view::npos || close < at + echo->marker.size()) {
      out.append("'");
      break;
    }
    i = close;
  }
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\x7f') c = '?';
  if (out.size() > kMaxServerTextBytes) {
    out.resize(kMaxServerTextBytes);
    out.append("...");
  }
  return out;
}

bool is_cluster_redirect(std::string_view text) noexcept {
  const std::string_view code = text.substr(0, text.find(' '));
  return code == "MOVED" || code == "ASK";
}

void check_not_cluster_redirect(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  if (reply.type != REDIS_REPLY_ERROR || !is_cluster_redirect({reply.str, reply.len})) return;
  throw ConfigError(describe(operation, endpoint,
                             "this server is a Redis Cluster node (it answered " +
                                 scrub_server_error({reply.str, reply.len}) +
                                 "): connect with a redis-cluster:// URL, not redis:// or redis-sentinel://"));
}

void throw_io_error(IoFailure failure, int saved_errno, std::string_view cause, Phase phase,
                    std::string_view endpoint, std::string_view operation) {
  const std::string reason = !cause.empty() ? std::string(cause)
                             : saved_errno != 0 ? std::string(std::strerror(saved_errno))
                                                : std::string("unknown I/O error");
  const bool timed_out = failure == IoFailure::timeout || (failure == IoFailure::io && is_timeout_errno(saved_errno));
  if (phase == Phase::connect) {
    // Whatever went wrong, nothing of the caller's command reached the server.
    if (timed_out) throw ConnectError(describe(operation, endpoint, "connect timed out"));
    if (failure == IoFailure::eof)
      throw ConnectError(describe(operation, endpoint, "cannot connect: server closed the connection" +
                                                           (cause.empty() ? std::string() : " (" + std::string(cause) + ")")));
    throw ConnectError(describe(operation, endpoint, "cannot connect: " + reason));
  }
  if (timed_out) throw TimeoutError(describe(operation, endpoint, "timed out waiting for the reply"));
  switch (failure) {
    case IoFailure::eof:
      throw ClosedError(describe(operation, endpoint, "server closed the connection" +
                                                          (cause.empty() ? std::string() : " (" + std::string(cause) + ")")));
    case IoFailure::protocol:
      throw ProtocolError(describe(operation, endpoint, "protocol error: " + reason));
    case IoFailure::io:
    case IoFailure::timeout:
      break;
  }
  throw ClosedError(describe(operation, endpoint, "connection broken: " + reason));
}

ReplyKind classify_reply_error(std::string_view text) noexcept {
  const std::string_view code = text.substr(0, text.find(' '));
  if (code == "WRONGTYPE") return ReplyKind::wrong_type;
  if (code == "NOAUTH" || code == "WRONGPASS") return ReplyKind::auth;
  // Redis 5 and older word authentication failures as plain ERR.
  if (code == "ERR" && (text.find("invalid password") != std::string_view::npos ||
                        text.find("AUTH <password> called without") != std::string_view::npos ||
                        text.find("no password is set") != std::string_view::npos))
    return ReplyKind::auth;
  if (code == "NOPERM") return ReplyKind::permission;
  if (code == "READONLY") return ReplyKind::read_only;
  // Cluster: a slot in flux (redirections left after the bounded retries of
  // routed_call, a failover under way) is a busy server, not a bug.
  if (code == "LOADING" || code == "BUSY" || code == "MASTERDOWN" || code == "TRYAGAIN" || code == "CLUSTERDOWN" ||
      code == "MOVED" || code == "ASK")
    return ReplyKind::busy;
  return ReplyKind::generic;
}

void throw_reply_error(std::string_view text, std::string_view endpoint, std::string_view operation) {
  std::string code = scrub_server_error(text.substr(0, text.find(' ')));
  const std::string scrubbed = scrub_server_error(text);
  std::string message = describe(operation, endpoint, scrubbed);
  if (code == "MOVED" || code == "ASK")
    message = describe(operation, endpoint, "the key's hash slot kept moving (last answer: " + scrubbed + ")");
  switch (classify_reply_error(text)) {
    case ReplyKind::wrong_type:
      throw WrongTypeError(message, std::move(code));
    case ReplyKind::auth:
      throw AuthError(message, std::move(code));
    case ReplyKind::permission:
      throw PermissionError(message, std::move(code));
    case ReplyKind::read_only:
      throw ReadOnlyError(message, std::move(code));
    case ReplyKind::busy:
      throw ServerBusyError(message, std::move(code));
    case ReplyKind::generic:
      break;
  }
  throw ReplyError(message, std::move(code));
}

void throw_reply_error(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  throw_reply_error(std::string_view(reply.str, reply.len), endpoint, operation);
}

void NodeFailures::add(const Error& failure) {
  // Most derived first: TlsError is a ConnectError, UnsupportedServerError a ConfigError.
  if (dynamic_cast<const TlsError*>(&failure) != nullptr) return note(Kind::tls, {});
  if (const auto* auth = dynamic_cast<const AuthError*>(&failure)) return note(Kind::auth, auth->code());
  if (const auto* denied = dynamic_cast<const PermissionError*>(&failure)) return note(Kind::permission, denied->code());
  if (dynamic_cast<const UnsupportedServerError*>(&failure) != nullptr) return note(Kind::unsupported_server, {});
  if (dynamic_cast<const ConfigError*>(&failure) != nullptr) return note(Kind::config, {});
  note(Kind::unclassified, {});
}

void NodeFailures::add_unclassified() noexcept { kind_ = Kind::unclassified; }

void NodeFailures::note(Kind kind, const std::string& code) {
  if (kind_ == Kind::none) {
    kind_ = kind;
    code_ = code;
  } else if (kind_ != kind) {
    kind_ = Kind::unclassified;
  }
}

void NodeFailures::throw_summary(const std::string& message) const {
  switch (kind_) {
    case Kind::auth:
      throw AuthError(message, code_);
    case Kind::permission:
      throw PermissionError(message, code_);
    case Kind::tls:
      throw TlsError(message);
    case Kind::unsupported_server:
      throw UnsupportedServerError(message);
    case Kind::config:
      throw ConfigError(message);
    case Kind::none:
    case Kind::unclassified:
      break;
  }
  throw ConnectError(message);
}

}  // namespace lockon::detail
