#include "client/script.hpp"

#include <openssl/evp.h>

#include <array>
#include <cstring>
#include <vector>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

std::string sha1_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha1(), nullptr) != 1)
    throw Error("OpenSSL SHA1 failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(length * 2, '0');
  for (unsigned int i = 0; i < length; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 0xF];
  }
  return hex;
}

enum class Verb { evalsha, eval };

// Builds [EVALSHA|EVAL, sha|body, numkeys, keys..., args...] on the stack
// for the common small case.
template <class Fn>
decltype(auto) with_eval_args(const Script& script, Verb verb, std::span<const std::string_view> keys,
                              std::span<const std::string_view> args, Fn&& fn) {
  const std::string numkeys = std::to_string(keys.size());
  constexpr std::size_t kInline = 16;
  const std::size_t total = 3 + keys.size() + args.size();
  std::array<std::string_view, kInline> inline_argv;
  std::vector<std::string_view> heap_argv;
  std::string_view* argv = inline_argv.data();
  if (total > kInline) {
    heap_argv.resize(total);
    argv = heap_argv.data();
  }
  argv[0] = verb == Verb::evalsha ? "EVALSHA" : "EVAL";
  argv[1] = verb == Verb::evalsha ? std::string_view(script.sha()) : std::string_view(script.body());
  argv[2] = numkeys;
  std::size_t i = 3;
  for (auto key : keys) argv[i++] = key;
  for (auto arg : args) argv[i++] = arg;
  return fn(std::span<const std::string_view>(argv, total));
}

}  // namespace

Script::Script(std::string body) : body_(std::move(body)), sha_(sha1_hex(body_)) {}

bool is_noscript(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_ERROR && reply.len >= 8 && std::memcmp(reply.str, "NOSCRIPT", 8) == 0;
}

void append_evalsha(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                    std::span<const std::string_view> args) {
  with_eval_args(script, Verb::evalsha, keys, args,
                 [&](std::span<const std::string_view> argv) { connection.append(argv); });
}

void append_eval(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> args) {
  with_eval_args(script, Verb::eval, keys, args,
                 [&](std::span<const std::string_view> argv) { connection.append(argv); });
}

ReplyPtr resolve_noscript(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                          std::span<const std::string_view> args, ReplyPtr reply, std::string_view operation) {
  if (!reply || !is_noscript(*reply)) return reply;
  return with_eval_args(script, Verb::eval, keys, args, [&](std::span<const std::string_view> argv) {
    return connection.command(argv, operation);
  });
}

ReplyPtr eval(Connection& connection, const Script& script, std::span<const std::string_view> keys,
              std::span<const std::string_view> args, std::string_view operation) {
  connection.ensure_connected();
  append_evalsha(connection, script, keys, args);
  ReplyPtr reply = connection.read_reply(operation);
  return resolve_noscript(connection, script, keys, args, std::move(reply), operation);
}

std::vector<ReplyPtr> eval_pipelined(Connection& connection, const Script& script, std::span<const ScriptCall> calls,
                                     std::string_view operation) {
  connection.ensure_connected();
  for (const ScriptCall& call : calls) append_evalsha(connection, script, call.keys, call.args);
  std::vector<ReplyPtr> replies;
  replies.reserve(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) replies.push_back(connection.read_reply(operation));
  for (std::size_t i = 0; i < calls.size(); ++i)
    replies[i] = resolve_noscript(connection, script, calls[i].keys, calls[i].args, std::move(replies[i]), operation);
  return replies;
}

}  // namespace lockon::detail
