// The client layer's one error mapping (src/error_map.*) and the handshake's
// server-version decision (src/server_version.*): error reply codes become
// the documented ReplyError subclasses with code() kept, and HELLO replies
// (fed as raw RESP bytes through hiredis' reader, exactly as they arrive)
// decide whether a server is new enough.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "client/error_map.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "client/server_version.hpp"
#include "resp_reply.hpp"

namespace {

using namespace lockon;
using detail::ReplyPtr;
using detail::test_resp::kEndpoint;

// -------------------------------------------------------------- error codes

struct MappingCase {
  std::string text;          // error reply text as the server sends it
  std::string code;          // expected code()
  const std::type_info* type;  // expected exact exception class
};

std::exception_ptr thrown_for(std::string_view text) {
  try {
    detail::throw_reply_error(text, kEndpoint, "acquire lock");
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

TEST(ErrorMap, ErrorCodesMapToDocumentedClassesKeepingCodeEndpointAndOperation) {
  const std::vector<MappingCase> cases{
      {"OOM command not allowed when used memory > 'maxmemory'.", "OOM", &typeid(ReplyError)},
      {"READONLY You can't write against a read only replica.", "READONLY", &typeid(ReadOnlyError)},
      {"NOPERM this user has no permissions to access one of the channels used as arguments", "NOPERM",
       &typeid(PermissionError)},
      {"NOPERM User app has no permissions to run the 'incr' command", "NOPERM", &typeid(PermissionError)},
      {"LOADING Redis is loading the dataset in memory", "LOADING", &typeid(ServerBusyError)},
      {"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", "BUSY",
       &typeid(ServerBusyError)},
      {"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", "MASTERDOWN",
       &typeid(ServerBusyError)},
      {"TRYAGAIN Multiple keys request during rehashing of slot", "TRYAGAIN", &typeid(ServerBusyError)},
      {"NOSCRIPT No matching script. Please use EVAL.", "NOSCRIPT", &typeid(ReplyError)},
      {"EXECABORT Transaction discarded because of previous errors.", "EXECABORT", &typeid(ReplyError)},
      {"WRONGTYPE Operation against a key holding the wrong kind of value", "WRONGTYPE", &typeid(WrongTypeError)},
      {"NOAUTH Authentication required.", "NOAUTH", &typeid(AuthError)},
      {"WRONGPASS invalid username-password pair or user is disabled.", "WRONGPASS", &typeid(AuthError)},
      {"ERR invalid password", "ERR", &typeid(AuthError)},
      {"ERR unknown command 'FOO'", "ERR", &typeid(ReplyError)},
      {"BUSYKEY Target key name already exists.", "BUSYKEY", &typeid(ReplyError)},  // not BUSY
      {"ERR", "ERR", &typeid(ReplyError)},                                         // code only
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::exception_ptr error = thrown_for(c.text);
    ASSERT_TRUE(error);
    try {
      std::rethrow_exception(error);
    } catch (const ReplyError& e) {
      EXPECT_EQ(typeid(e), *c.type) << typeid(e).name();
      EXPECT_EQ(e.code(), c.code);
      const std::string message = e.what();
      EXPECT_NE(message.find("acquire lock on 127.0.0.1:6379"), std::string::npos) << message;
      EXPECT_NE(message.find(c.text), std::string::npos) << message;
    } catch (...) {
      ADD_FAILURE() << "not a ReplyError";
    }
  }
}

// issue 35 §8: LossReason had no to_string (logs and metrics labels).
TEST(LossReasonText, EveryReasonHasItsEnumeratorsName) {
  EXPECT_EQ(to_string(LossReason::taken), "taken");
  EXPECT_EQ(to_string(LossReason::unreachable), "unreachable");
  EXPECT_EQ(to_string(LossReason::max_hold), "max_hold");
  EXPECT_EQ(to_string(static_cast<LossReason>(42)), "unknown");
}

TEST(ErrorMap, HiredisErrorReplyMapsLikeItsText) {
  std::string text = "READONLY You can't write against a read only replica.";
  redisReply reply{};
  reply.type = REDIS_REPLY_ERROR;
  reply.str = text.data();
  reply.len = text.size();
  EXPECT_THROW(detail::check_reply(reply, kEndpoint, "SET"), ReadOnlyError);
  reply.type = REDIS_REPLY_STATUS;
  EXPECT_NO_THROW(detail::check_reply(reply, kEndpoint, "SET"));
}

// ------------------------------------------------------------ server version

TEST(ServerVersion, ParsesMajorMinorPatchAndToleratesShortOrSuffixedForms) {
  const auto v = detail::parse_server_version("7.2.4");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->major, 7);
  EXPECT_EQ(v->minor, 2);
  EXPECT_EQ(v->patch, 4);
  const auto short_form = detail::parse_server_version("8.0");
  ASSERT_TRUE(short_form);
  EXPECT_EQ(short_form->major, 8);
  EXPECT_EQ(short_form->patch, 0);
  const auto rc = detail::parse_server_version("7.4.0-rc1");
  ASSERT_TRUE(rc);
  EXPECT_EQ(rc->minor, 4);
  EXPECT_FALSE(detail::parse_server_version(""));
  EXPECT_FALSE(detail::parse_server_version("unknown"));
  EXPECT_FALSE(detail::parse_server_version("-1.0.0"));
}

TEST(ServerVersion, SevenPointZeroIsTheMinimum) {
  for (const char* ok : {"7.0.0", "7.0.15", "7.2.4", "7.4.1", "8.0.0", "10.0.0"})
    EXPECT_TRUE(detail::is_supported(*detail::parse_server_version(ok))) << ok;
  for (const char* old : {"6.2.14", "6.0.0", "5.0.14", "6.9.99", "2.8.24"})
    EXPECT_FALSE(detail::is_supported(*detail::parse_server_version(old))) << old;
}

// Replies as the connection would see them (unit/resp_reply.hpp).
using detail::test_resp::bulk;
using detail::test_resp::hello_reply;
using detail::test_resp::parse;

std::string unsupported_message(std::string_view resp) {
  const ReplyPtr reply = parse(resp);
  try {
    detail::check_hello_reply(*reply, kEndpoint);
  } catch (const UnsupportedServerError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << resp;
  return {};
}

TEST(ServerVersion, HelloReplyOfRedisSevenOrValkeyIsAccepted) {
  EXPECT_NO_THROW(detail::check_hello_reply(*parse(hello_reply("redis", "7.0.15")), kEndpoint));
  EXPECT_NO_THROW(detail::check_hello_reply(*parse(hello_reply("valkey", "8.0.1")), kEndpoint));
  EXPECT_EQ(detail::hello_field(*parse(hello_reply("redis", "7.0.15")), "version"), "7.0.15");
  EXPECT_EQ(detail::hello_field(*parse(hello_reply("redis", "7.0.15")), "absent"), "");
}

TEST(ServerVersion, OldServerIsUnsupportedServerErrorNamingRequirementEndpointAndVersion) {
  const std::string message = unsupported_message(hello_reply("redis", "6.2.14"));
  EXPECT_NE(message.find("lockon needs Redis >= 7.0"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:6379 runs 6.2.14"), std::string::npos) << message;
  // A ConfigError: retrying does not help.
  const ReplyPtr reply = parse(hello_reply("redis", "6.0.9"));
  EXPECT_THROW(detail::check_hello_reply(*reply, kEndpoint), ConfigError);
}

TEST(ServerVersion, ServerWithoutHelloIsUnsupported) {
  for (const char* text : {"-ERR unknown command 'HELLO'\r\n",
                           "-ERR unknown command `HELLO`, with args beginning with: `2`, \r\n"}) {
    const std::string message = unsupported_message(text);
    EXPECT_NE(message.find("lockon needs Redis >= 7.0; 127.0.0.1:6379"), std::string::npos) << message;
    EXPECT_NE(message.find("HELLO"), std::string::npos) << message;
  }
}

TEST(ServerVersion, HelloWithoutAVersionIsUnsupported) {
  const std::string message = unsupported_message("*2\r\n" + bulk("server") + bulk("proxy"));
  EXPECT_NE(message.find("no version"), std::string::npos) << message;
}

TEST(ServerVersion, HelloAuthFailuresStayAuthErrors) {
  EXPECT_THROW(detail::check_hello_reply(*parse("-WRONGPASS invalid username-password pair or user is disabled.\r\n"),
                                         kEndpoint),
               AuthError);
  EXPECT_THROW(detail::check_hello_reply(
                   *parse("-NOAUTH HELLO must be called with the client already authenticated\r\n"), kEndpoint),
               AuthError);
}

}  // namespace
