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

/// A pushed pub/sub message: ["message", channel, payload].
inline ReplyPtr message(std::string_view channel, std::string_view payload) {
  return parse("*3\r\n" + bulk("message") + bulk(channel) + bulk(payload));
}

}  // namespace lockon::detail::test_resp
