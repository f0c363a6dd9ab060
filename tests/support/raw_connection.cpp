// support/raw_connection.cpp — see raw_connection.hpp.
#include "support/raw_connection.hpp"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <sstream>

namespace lockon::test {
namespace {

timeval to_timeval(std::chrono::milliseconds duration) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(duration.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((duration.count() % 1000) * 1000);
  return tv;
}

bool looks_like_timeout(int error_number, const char* message) {
  const std::string text = message != nullptr ? message : "";
  return error_number == EAGAIN || error_number == EWOULDBLOCK || error_number == ETIMEDOUT ||
         text.find("timed out") != std::string::npos ||
         text.find("temporarily unavailable") != std::string::npos;
}

RawReply convert(const redisReply& reply) {
  RawReply result;
  switch (reply.type) {
    case REDIS_REPLY_STRING:
      result.type = RawReply::Type::string;
      result.str.assign(reply.str, reply.len);
      break;
    case REDIS_REPLY_STATUS:
      result.type = RawReply::Type::status;
      result.str.assign(reply.str, reply.len);
      break;
    case REDIS_REPLY_ERROR:
      result.type = RawReply::Type::error;
      result.str.assign(reply.str, reply.len);
      break;
    case REDIS_REPLY_INTEGER:
      result.type = RawReply::Type::integer;
      result.integer = reply.integer;
      break;
    case REDIS_REPLY_ARRAY:
      result.type = RawReply::Type::array;
      for (std::size_t i = 0; i < reply.elements; ++i) {
        result.elements.push_back(convert(*reply.element[i]));
      }
      break;
    default:
      result.type = RawReply::Type::nil;
  }
  return result;
}

}  // namespace

// ------------------------------------------------------------ RawReply

std::string RawReply::to_string() const {
  switch (type) {
    case Type::nil: return "(nil)";
    case Type::integer: return "(integer) " + std::to_string(integer);
    case Type::error: return "(error) " + str;
    case Type::status: return str;
    case Type::string: return "\"" + str + "\"";
    case Type::array: {
      std::string text = "[";
      for (std::size_t i = 0; i < elements.size(); ++i) {
        text += (i == 0 ? "" : ", ") + elements[i].to_string();
      }
      return text + "]";
    }
  }
  return "?";
}

// ------------------------------------------------------- RawConnection

void RawConnection::Free::operator()(redisContext* context) const noexcept { redisFree(context); }

RawConnection::RawConnection(const std::string& host, int port, const RawConnectOptions& options)
    : endpoint_(host + ":" + std::to_string(port)) {
  errno = 0;
  context_.reset(redisConnectWithTimeout(host.c_str(), port, to_timeval(options.connect_timeout)));
  const int connect_errno = errno;
  if (!context_) throw RawIoError("connect to " + endpoint_ + ": out of memory", false);
  if (context_->err != 0) {
    throw RawIoError("connect to " + endpoint_ + ": " + context_->errstr,
                     looks_like_timeout(connect_errno, context_->errstr));
  }
  redisSetTimeout(context_.get(), to_timeval(options.command_timeout));
  if (!options.password.empty()) {
    std::vector<std::string> auth{"AUTH"};
    if (!options.user.empty()) auth.push_back(options.user);
    auth.push_back(options.password);
    const RawReply reply = command(auth);
    if (reply.is_error()) {  // never echo the password
      throw std::runtime_error("AUTH" + (options.user.empty() ? "" : " as " + options.user) +
                               " on " + endpoint_ + " refused: " + reply.str);
    }
  }
}

RawConnection::RawConnection(RawConnection&&) noexcept = default;
RawConnection& RawConnection::operator=(RawConnection&&) noexcept = default;
RawConnection::~RawConnection() = default;

RawReply RawConnection::command(const std::vector<std::string>& args) {
  if (!context_) throw RawIoError("use of a moved-from RawConnection", false);
  if (args.empty()) throw std::invalid_argument("RawConnection::command: no arguments");
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const auto& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  errno = 0;
  void* raw = redisCommandArgv(context_.get(), static_cast<int>(args.size()), argv.data(),
                               lengths.data());
  const int command_errno = errno;
  if (raw == nullptr) {
    throw RawIoError(endpoint_ + " " + args.front() + ": " + context_->errstr,
                     looks_like_timeout(command_errno, context_->errstr));
  }
  const std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw),
                                                           freeReplyObject);
  return convert(*reply);
}

RawReply RawConnection::next_reply() {
  if (!context_) throw RawIoError("use of a moved-from RawConnection", false);
  errno = 0;
  void* raw = nullptr;
  const int status = redisGetReply(context_.get(), &raw);
  const int read_errno = errno;
  if (status != REDIS_OK || raw == nullptr) {
    throw RawIoError(endpoint_ + " (waiting for a pushed message): " + context_->errstr,
                     looks_like_timeout(read_errno, context_->errstr));
  }
  const std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw), freeReplyObject);
  return convert(*reply);
}

void RawConnection::set_command_timeout(std::chrono::milliseconds timeout) {
  if (context_) redisSetTimeout(context_.get(), to_timeval(timeout));
}

std::vector<std::string> pubsub_clients(RawConnection& connection) {
  std::vector<std::string> out;
  std::istringstream lines(connection.command({"CLIENT", "LIST", "TYPE", "pubsub"}).str);
  std::string line;
  while (std::getline(lines, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

long long subscriptions(const std::string& client_line) {
  const auto at = client_line.find(" sub=");
  return at == std::string::npos ? -1 : std::stoll(client_line.substr(at + 5));
}

}  // namespace lockon::test
