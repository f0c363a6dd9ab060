// Owning handles for hiredis objects. Private: hiredis never leaks into
// lockon's public headers.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>

namespace lockon::detail {

struct ReaderDeleter {
  void operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

inline bool is_error_reply(const redisReply& reply) noexcept { return reply.type == REDIS_REPLY_ERROR; }

}  // namespace lockon::detail
