// unit/resp_reply.hpp — replies built from RESP bytes with hiredis' own
// reader: exactly what a connection would hand the code under test.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "client/hiredis_handles.hpp"

namespace lockon::detail::test_resp {

inline ReplyPtr parse(std::string_view bytes) {
  ReaderPtr reader(redisReaderCreate());
  EXPECT_EQ(redisReaderFeed(reader.get(), bytes.data(), bytes.size()), REDIS_OK);
  void* raw = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &raw), REDIS_OK);
  EXPECT_NE(raw, nullptr) << "incomplete RESP in the test";
  return ReplyPtr(static_cast<redisReply*>(raw));
}

inline std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n"; }

/// HELLO 2's reply, a flat array of field, value pairs: `server` ("redis",
/// "valkey") of `version`, running in `mode` ("standalone", "cluster",
/// "sentinel").
inline std::string hello_reply(std::string_view server, std::string_view version,
                               std::string_view mode = "standalone") {
  return "*14\r\n" + bulk("server") + bulk(server) + bulk("version") + bulk(version) + bulk("proto") + ":2\r\n" +
         bulk("id") + ":7\r\n" + bulk("mode") + bulk(mode) + bulk("role") + bulk("master") + bulk("modules") +
         "*0\r\n";
}

/// The endpoint the error-mapping tests attribute replies to (their
/// messages name it).
inline constexpr std::string_view kEndpoint = "127.0.0.1:6379";

/// A pushed pub/sub message: ["message", channel, payload].
inline ReplyPtr message(std::string_view channel, std::string_view payload) {
  return parse("*3\r\n" + bulk("message") + bulk(channel) + bulk(payload));
}

}  // namespace lockon::detail::test_resp
