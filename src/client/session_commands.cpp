#include "client/session_commands.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

bool equal_nocase(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) == std::toupper(static_cast<unsigned char>(y));
         });
}

bool is_one_of(std::string_view name, std::span<const std::string_view> names) noexcept {
  return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return equal_nocase(name, n); });
}

// Never allowed: they change the session or the reply stream for good.
constexpr std::array<std::string_view, 17> kNever{
    "SELECT",    "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE",
    "SUNSUBSCRIBE", "MONITOR", "HELLO",     "AUTH",      "RESET",       "QUIT",
    "READONLY",  "READWRITE", "SYNC",       "PSYNC",     "REPLCONF"};
// Allowed in a pipeline that closes them.
constexpr std::array<std::string_view, 5> kTransaction{"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"};

[[noreturn]] void refuse(std::string_view name, std::string_view where, std::string_view why) {
  throw ConfigError(std::string(where) + ": " + std::string(name) + " is not allowed here: " + std::string(why));
}

void check_never(std::span<const std::string_view> args, std::string_view where) {
  const std::string_view name = args.front();
  if (is_one_of(name, kNever))
    refuse(name, where,
           "it would change the session of a connection lockon shares (database, protocol, user, "
           "subscriptions, replies); configure it in the URL (db, user, password) or use a connection of your own");
  if (equal_nocase(name, "CLIENT") && args.size() > 1 &&
      (equal_nocase(args[1], "REPLY") || equal_nocase(args[1], "TRACKING")))
    refuse("CLIENT " + std::string(args[1]), where, "it would change which replies a shared connection sends");
}

}  // namespace

void check_shareable_command(std::span<const std::string_view> args, std::string_view where) {
  if (args.empty()) return;
  check_never(args, where);
  if (is_one_of(args.front(), kTransaction))
    refuse(args.front(), where, "a transaction must be sent whole, in one pipeline (Client::pipeline)");
}

void check_shareable_pipeline(std::span<const std::span<const std::string_view>> commands, std::string_view where) {
  bool in_multi = false;
  bool watching = false;
  for (const auto& args : commands) {
    if (args.empty()) continue;
    check_never(args, where);
    const std::string_view name = args.front();
    if (equal_nocase(name, "MULTI")) {
      if (in_multi) refuse(name, where, "MULTI calls can not be nested");
      in_multi = true;
    } else if (equal_nocase(name, "EXEC") || equal_nocase(name, "DISCARD")) {
      // Without a MULTI they are errors and the keys stay watched.
      if (in_multi) watching = false;
      in_multi = false;
    } else if (equal_nocase(name, "WATCH")) {
      watching = true;
    } else if (equal_nocase(name, "UNWATCH")) {
      watching = false;
    }
  }
  if (in_multi) refuse("MULTI", where, "the pipeline leaves the transaction open (end it with EXEC or DISCARD)");
  if (watching) refuse("WATCH", where, "the pipeline leaves keys watched (end it with EXEC, DISCARD or UNWATCH)");
}

}  // namespace lockon::detail
