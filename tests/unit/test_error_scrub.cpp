// The error mapping's scrubbing of server texts (src/client/error_map.*):
// a server may echo a request's arguments — a lock token, a password — in
// an error reply; no exception message carries them (issue 33, §5). Also
// the wrong-deployment checks of the same module: a MOVED to a client that
// follows no redirections, and a Sentinel's HELLO where a data server is
// expected, are ConfigErrors naming the right URL scheme.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>

#include "resp_reply.hpp"
#include "client/error_map.hpp"
#include "client/server_version.hpp"
#include "lockon/errors.hpp"

namespace {

using namespace lockon;
using detail::ReplyPtr;
using detail::test_resp::kEndpoint;

constexpr std::string_view kToken = "653270647ae9d1c04b2f8e5a9c3d7b61:0a1b2c3d4e5f";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string message_for(std::string_view text) {
  try {
    detail::throw_reply_error(text, kEndpoint, "acquire lock");
  } catch (const ReplyError& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown for " << text;
  return {};
}

// Redis 7 (quotes) and 6.2 (backquotes, commas), as a Sentinel or a server
// with SET renamed answers a lock's SET.
TEST(ScrubServerError, UnknownCommandEchoesAreWithheld) {
  const std::string redis7 = "ERR unknown command 'SET', with args beginning with: 'urlcase:x' '" +
                             std::string(kToken) + "' 'NX' 'PX' '30000' ";
  const std::string redis6 = "ERR unknown command `SET`, with args beginning with: `urlcase:x`, `" +
                             std::string(kToken) + "`, `NX`, ";
  for (const std::string& text : {redis7, redis6}) {
    const std::string message = message_for(text);
    EXPECT_FALSE(contains(message, kToken)) << message;
    EXPECT_FALSE(contains(message, "urlcase:x")) << message;
    EXPECT_TRUE(contains(message, "unknown command")) << message;
    EXPECT_TRUE(contains(message, "SET")) << "the command name stays: " << message;
    EXPECT_TRUE(contains(message, "(arguments withheld)")) << message;
    EXPECT_TRUE(contains(message, "acquire lock on 127.0.0.1:6379")) << message;
  }
  // The class and code() are unchanged.
  try {
    detail::throw_reply_error(redis7, kEndpoint, "acquire lock");
  } catch (const ReplyError& e) {
    EXPECT_EQ(e.code(), "ERR");
  }
}

TEST(ScrubServerError, AclModifierEchoIsWithheld) {
  const std::string message = message_for("ERR Error in ACL SETUSER modifier '>Sup3r-Secret': Syntax error");
  EXPECT_FALSE(contains(message, "Sup3r-Secret")) << message;
  EXPECT_TRUE(contains(message, "': Syntax error")) << message;
  // A quote inside the argument does not end the echo early.
  const std::string quoted = message_for("ERR Error in ACL SETUSER modifier '>it's-Secret': Syntax error");
  EXPECT_FALSE(contains(quoted, "s-Secret")) << quoted;
}

TEST(ScrubServerError, TextsWithoutEchoesAreKept) {
  for (const char* text : {"WRONGTYPE Operation against a key holding the wrong kind of value",
                           "NOSCRIPT No matching script. Please use EVAL.",
                           "ERR Script attempted to access a non local key in a cluster node script: "
                           "4a1f0e2b9c3d7e6f5a4b3c2d1e0f9a8b7c6d5e4f, on @user_script:37.",
                           "ERR Error running script (call to f_4a1f0e2b): @user_script:12: user_script:12: "
                           "attempt to compare nil with number",
                           "MOVED 3999 127.0.0.1:7001"}) {
    EXPECT_EQ(detail::scrub_server_error(text), text);
  }
}

TEST(ScrubServerError, ControlBytesAndLengthAreBounded) {
  EXPECT_EQ(detail::scrub_server_error("ERR a\r\nb\x1b[31m"), "ERR a??b?[31m");
  const std::string huge = "ERR " + std::string(100'000, 'y');
  const std::string scrubbed = detail::scrub_server_error(huge);
  EXPECT_LE(scrubbed.size(), detail::kMaxServerTextBytes + 3);
  EXPECT_LT(message_for(huge).size(), detail::kMaxServerTextBytes + 200);
}

// The fuzzer found a reply whose message outgrew the reply: a one-character
// echo became the placeholder, twice (a quoted echo, then one to the end).
TEST(ScrubServerError, APlaceholderGrowsTheTextByAtMostTheStatedBound) {
  for (const char* text : {"ASK x modifier '': with args beginning with:", "ERR modifier ''",
                           "ERR with args beginning with:", "ERR modifier 'a': b modifier 'c",
                           "ASK boom\x01" "a\x01" "E -na\x01ulmodifier ''"}) {
    const std::string scrubbed = detail::scrub_server_error(text);
    EXPECT_TRUE(contains(scrubbed, detail::kArgumentsWithheld)) << scrubbed;
    EXPECT_LE(scrubbed.size(), std::string_view(text).size() + detail::kMaxScrubGrowth) << scrubbed;
  }
}

// ------------------------------------------------------- wrong deployments

using detail::test_resp::hello_reply;
using detail::test_resp::parse;

TEST(WrongDeployment, ASentinelWhereADataServerIsExpectedIsAConfigError) {
  const ReplyPtr sentinel = parse(hello_reply("redis", "7.0.15", "sentinel"));
  try {
    detail::check_hello_reply(*sentinel, kEndpoint, "SET (connection handshake: HELLO)");
    ADD_FAILURE() << "a Sentinel was accepted as a data server";
  } catch (const UnsupportedServerError& e) {
    ADD_FAILURE() << "not an old server: " << e.what();
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "Redis Sentinel")) << e.what();
    EXPECT_TRUE(contains(e.what(), "redis-sentinel://")) << e.what();
    EXPECT_TRUE(contains(e.what(), kEndpoint)) << e.what();
  }
  // Where a Sentinel is meant (resolving the master), it is one.
  EXPECT_NO_THROW(detail::check_hello_reply(*sentinel, kEndpoint, "HELLO", detail::ServerRole::sentinel));
  EXPECT_NO_THROW(detail::check_hello_reply(*parse(hello_reply("redis", "7.0.15", "standalone")), kEndpoint));
  EXPECT_NO_THROW(detail::check_hello_reply(*parse(hello_reply("redis", "7.0.15", "cluster")), kEndpoint));
}

TEST(WrongDeployment, AClusterRedirectionWithoutClusterRoutingIsAConfigError) {
  for (const char* text : {"-MOVED 3999 127.0.0.1:7001\r\n", "-ASK 3999 127.0.0.1:7001\r\n"}) {
    const ReplyPtr reply = parse(text);
    EXPECT_TRUE(detail::is_cluster_redirect({reply->str, reply->len}));
    try {
      detail::check_not_cluster_redirect(*reply, kEndpoint, "acquire lock");
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "Redis Cluster node")) << e.what();
      EXPECT_TRUE(contains(e.what(), "redis-cluster://")) << e.what();
    }
  }
  for (const char* text : {"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", "-ERR x\r\n", "+OK\r\n"})
    EXPECT_NO_THROW(detail::check_not_cluster_redirect(*parse(text), kEndpoint, "acquire lock")) << text;
  // A Cluster client that ran out of redirections: still a busy server.
  EXPECT_THROW(detail::throw_reply_error("MOVED 3999 127.0.0.1:7001", kEndpoint, "acquire lock"), ServerBusyError);
}

}  // namespace
