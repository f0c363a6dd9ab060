// Fuzz target: reply classification and error mapping — arbitrary bytes
// through hiredis' reply reader (as a connection would receive them), then
// detail::to_reply (src/client/client.cpp) and detail::throw_reply_error
// (src/client/error_map.cpp).
//
// Properties: no crash; only lockon::Error subclasses escape; an error reply
// maps to ReplyError (AuthError / WrongTypeError by code) whose code() is the
// reply's first word; a message is bounded by the reply's own size plus the
// fixed text around it; a converted reply mirrors hiredis' reply exactly.
#include <fuzzer/FuzzedDataProvider.h>
#include <hiredis/hiredis.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <exception>
#include <string>
#include <string_view>

#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "fuzz_check.hpp"
#include "lockon/errors.hpp"

// hiredis 0.14 callocs a multi-bulk's element array before reading the
// elements, so "*4294967295\r\n" asks for 32 GiB. In a real client that is
// hiredis' (and the trusted server's) business; here it would only stop the
// run. Let such allocations fail instead (hiredis then reports out of memory,
// which is a reader error like any other).
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:max_allocation_size_mb=256"; }

namespace {

using lockon::fuzz::check;
using lockon::fuzz::fail;

constexpr std::string_view kEndpoint = "127.0.0.1:6379";
constexpr std::string_view kOperation = "EVALSHA";
// describe(): operation + " on " + endpoint + ": " + cause.
constexpr std::size_t kFixedText = kOperation.size() + 4 + kEndpoint.size() + 2;
// A mapped error may add a fixed explanation around the server's text (a
// redirection that never settled: "the key's hash slot kept moving (last
// answer: ...)"), and scrubbing may put the arguments-withheld placeholder
// where the server echoed one short argument (kMaxScrubGrowth); what must
// stay bounded is the echo of the reply itself.
constexpr std::size_t kExplanation = 64 + lockon::detail::kMaxScrubGrowth;

// Size of the text of every error reply in `reply` (the first one thrown is among them).
std::size_t longest_error(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR) return reply.len;
  std::size_t longest = 0;
  if (reply.type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < reply.elements; ++i) longest = std::max(longest, longest_error(*reply.element[i]));
  }
  return longest;
}

// The first error reply in depth-first order: the one to_reply throws.
const redisReply* first_error(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR) return &reply;
  if (reply.type == REDIS_REPLY_ARRAY) {
    for (std::size_t i = 0; i < reply.elements; ++i) {
      if (const redisReply* found = first_error(*reply.element[i])) return found;
    }
  }
  return nullptr;
}

void check_mirrors(const lockon::Reply& converted, const redisReply& raw) {
  using Type = lockon::Reply::Type;
  switch (raw.type) {
    case REDIS_REPLY_INTEGER:
      check(converted.type() == Type::integer && converted.as_integer() == raw.integer, "integer reply changed");
      return;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      check(converted.type() == (raw.type == REDIS_REPLY_STRING ? Type::string : Type::status) &&
                converted.as_string() == std::string_view(raw.str, raw.len),
            "string/status reply changed");
      return;
    case REDIS_REPLY_NIL:
      check(converted.is_nil(), "nil reply changed");
      return;
    case REDIS_REPLY_ARRAY:
      check(converted.type() == Type::array && converted.elements().size() == raw.elements, "array reply changed");
      for (std::size_t i = 0; i < raw.elements; ++i) check_mirrors(converted.elements()[i], *raw.element[i]);
      return;
    default:
      fail("a reply of unknown type converted without an error");
  }
}

void check_reply_error(const lockon::ReplyError& e, const redisReply& error_reply) {
  const std::string_view text(error_reply.str, error_reply.len);
  // The code is the first word as every server text is shown: scrubbed
  // (control bytes as '?', argument echoes withheld: client/error_map.hpp).
  check(e.code() == lockon::detail::scrub_server_error(text.substr(0, text.find(' '))),
        "ReplyError::code() is not the first word", e.what());
  const bool is_auth = dynamic_cast<const lockon::AuthError*>(&e) != nullptr;
  const bool is_wrongtype = dynamic_cast<const lockon::WrongTypeError*>(&e) != nullptr;
  if (e.code() == "WRONGTYPE") check(is_wrongtype, "WRONGTYPE not mapped to WrongTypeError");
  if (e.code() == "NOAUTH" || e.code() == "WRONGPASS") check(is_auth, "NOAUTH/WRONGPASS not mapped to AuthError");
  check(!(is_auth && is_wrongtype), "error mapped to two classes");
}

void convert(const redisReply& reply) {
  const std::size_t bound = kFixedText + kExplanation + longest_error(reply);
  try {
    const lockon::Reply converted = lockon::detail::to_reply(reply, kEndpoint, kOperation);
    check(first_error(reply) == nullptr, "to_reply returned for a reply containing an error");
    check_mirrors(converted, reply);
  } catch (const lockon::ReplyError& e) {
    const redisReply* error_reply = first_error(reply);
    check(error_reply != nullptr, "ReplyError without an error reply", e.what());
    check(std::string_view(e.what()).size() <= bound, "ReplyError message longer than its reply", e.what());
    check_reply_error(e, *error_reply);
  } catch (const lockon::Error& e) {
    check(std::string_view(e.what()).size() <= bound, "error message unbounded", e.what());
  } catch (const std::exception& e) {
    fail("to_reply let a non-lockon exception escape", e.what());
  } catch (...) {
    fail("to_reply let a non-std exception escape");
  }
}

// A reader failure as a connection would report it: the IoError mapping
// (throw_io_error, a protocol failure) with the reader's text.
void map_reader_failure(const redisReader& reader, int saved_errno, bool connecting) {
  char errstr[sizeof reader.errstr];
  std::memcpy(errstr, reader.errstr, sizeof errstr);
  errstr[sizeof errstr - 1] = '\0';
  const auto phase = connecting ? lockon::detail::Phase::connect : lockon::detail::Phase::command;
  try {
    lockon::detail::throw_io_error(lockon::detail::IoFailure::protocol, saved_errno, errstr, phase, kEndpoint,
                                   kOperation);
  } catch (const lockon::IoError& e) {
    check(!connecting || dynamic_cast<const lockon::ConnectError*>(&e) != nullptr,
          "a failure while connecting is not a ConnectError", e.what());
    check(std::string_view(e.what()).size() <= kFixedText + 32 + sizeof errstr, "IoError message unbounded",
          e.what());
    return;
  } catch (const std::exception& e) {
    fail("throw_io_error threw something other than an IoError", e.what());
  }
  fail("throw_io_error returned");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  // Feed in fuzzer-chosen chunks, as a socket would deliver them, and take
  // every complete reply until the reader wants more or fails.
  FuzzedDataProvider data(bytes, size);
  redisReader* reader = redisReaderCreate();
  if (reader == nullptr) return 0;
  for (int round = 0; round < 64 && data.remaining_bytes() > 0; ++round) {
    const std::string chunk = data.ConsumeRandomLengthString(256);
    if (redisReaderFeed(reader, chunk.data(), chunk.size()) != REDIS_OK) break;
    bool failed = false;
    for (int replies = 0; replies < 64; ++replies) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK) {
        // A protocol error: check_context's path, with the reader's message.
        check(reader->err != 0, "reader failed without an error code");
        map_reader_failure(*reader, data.ConsumeIntegral<int>(), data.ConsumeBool());
        failed = true;
        break;
      }
      if (raw == nullptr) break;
      convert(*static_cast<redisReply*>(raw));
      freeReplyObject(raw);
    }
    if (failed) break;
  }
  redisReaderFree(reader);
  return 0;
}
