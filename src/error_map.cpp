#include "error_map.hpp"

#include <cerrno>
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

}  // namespace

void throw_context_error(const redisContext* context, int saved_errno, Phase phase, std::string_view endpoint,
                         std::string_view operation) {
  if (context == nullptr) throw ConnectError(describe(operation, endpoint, "cannot allocate a connection"));
  const std::string cause = context->errstr[0] != '\0' ? context->errstr : "unknown hiredis error";
  const bool timed_out = context->err == REDIS_ERR_IO && is_timeout_errno(saved_errno);
  if (phase == Phase::connect) {
    // Whatever went wrong, nothing reached the server.
    throw ConnectError(describe(operation, endpoint, timed_out ? "connect timed out" : "cannot connect: " + cause));
  }
  switch (context->err) {
    case REDIS_ERR_IO:
      if (timed_out) throw TimeoutError(describe(operation, endpoint, "timed out waiting for the reply"));
      throw ClosedError(describe(operation, endpoint, "connection broken: " + cause));
    case REDIS_ERR_EOF:
      throw ClosedError(describe(operation, endpoint, "server closed the connection"));
    case REDIS_ERR_PROTOCOL:
      throw ProtocolError(describe(operation, endpoint, "protocol error: " + cause));
    default:
      throw IoError(describe(operation, endpoint, cause));
  }
}

void throw_reply_error(const redisReply& reply, std::string_view endpoint, std::string_view operation) {
  const std::string_view text(reply.str, reply.len);
  const std::string code(text.substr(0, text.find(' ')));
  const std::string message = describe(operation, endpoint, text);
  if (code == "WRONGTYPE") throw WrongTypeError(message, code);
  if (code == "NOAUTH" || code == "WRONGPASS" ||
      (code == "ERR" && (text.find("invalid password") != std::string_view::npos ||
                         text.find("AUTH <password> called without") != std::string_view::npos ||
                         text.find("no password is set") != std::string_view::npos)))
    throw AuthError(message, code);
  throw ReplyError(message, code);
}

}  // namespace lockon::detail
