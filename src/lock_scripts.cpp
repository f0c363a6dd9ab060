#include "lock_scripts.hpp"

namespace lockon::detail {

std::string companion_key(std::string_view key, std::string_view suffix) {
  // Redis Cluster hashes only the first {...} with a non-empty inside.
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      std::string out(key);
      out.append(":").append(suffix);
      return out;
    }
  }
  std::string out;
  out.reserve(key.size() + suffix.size() + 3);
  out.append("{").append(key).append("}:").append(suffix);
  return out;
}

std::string wake_channel(std::string_view key, std::string_view subscriber_id) {
  std::string suffix("wake:");
  suffix.append(subscriber_id);
  return companion_key(key, suffix);
}

namespace scripts {
namespace {

// Gives K to the first queued waiter whose process still listens, or
// deletes K when there is none. KEYS[1..4] = lock, queue, fence, hand-over
// fence. Defined in every script that hands over. The wake-up channel is
// the queue key with "q" replaced by "wake:<subscriber id>" (wake_channel()).
#define LOCKON_LUA_HAND_OVER                                                                        \
  "local wake_prefix = string.sub(KEYS[2], 1, -2) .. 'wake:'\n"                                    \
  "local function hand_over()\n"                                                                    \
  "  while true do\n"                                                                               \
  "    local entry = redis.call('LPOP', KEYS[2])\n"                                                 \
  "    if not entry then\n"                                                                         \
  "      redis.call('DEL', KEYS[1])\n"                                                              \
  "      return false\n"                                                                            \
  "    end\n"                                                                                       \
  "    local sid, wid, ttl, fenced, token = string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n" \
  "    if token then\n"                                                                             \
  "      if ttl == '0' then redis.call('SET', KEYS[1], token)\n"                                    \
  "      else redis.call('SET', KEYS[1], token, 'PX', ttl) end\n"                                   \
  "      local fence = 0\n"                                                                         \
  "      if fenced == '1' then\n"                                                                   \
  "        fence = redis.call('INCR', KEYS[3])\n"                                                   \
  "        redis.call('SET', KEYS[4], token .. ' ' .. fence, 'PX', ttl == '0' and 86400000 or ttl)\n" \
  "      end\n"                                                                                     \
  "      if redis.call('PUBLISH', wake_prefix .. sid, wid .. ' ' .. fence) > 0 then return true end\n" \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "end\n"

// Splits the caller's own entry (ARGV[1]) into its token and ttl.
#define LOCKON_LUA_MY_ENTRY                                                                         \
  "local _, my_id, my_ttl, my_fenced, my_token = string.match(ARGV[1], '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n"

}  // namespace

const Script& wait_attempt() {
  static const Script script(
      LOCKON_LUA_HAND_OVER LOCKON_LUA_MY_ENTRY
      // GET first: a key of another type fails here with WRONGTYPE.
      "local holder = redis.call('GET', KEYS[1])\n"
      "local function fence_of_handover()\n"
      "  if my_fenced ~= '1' then return 0 end\n"
      "  local record = redis.call('GET', KEYS[4])\n"
      "  if record and string.sub(record, 1, #my_token + 1) == my_token .. ' ' then\n"
      "    return tonumber(string.sub(record, #my_token + 2))\n"
      "  end\n"
      "  return 0\n"
      "end\n"
      "if holder == my_token then return {1, fence_of_handover()} end\n"
      "if not holder then\n"
      "  local head = redis.call('LINDEX', KEYS[2], 0)\n"
      "  if head and head ~= ARGV[1] then\n"
      // Free with others first in line (the holder expired without a
      // release): hand it down the line; it may reach us.
      "    hand_over()\n"
      "    holder = redis.call('GET', KEYS[1])\n"
      "    if holder == my_token then return {1, fence_of_handover()} end\n"
      "  end\n"
      "  if not holder then\n"
      "    if head == ARGV[1] then redis.call('LPOP', KEYS[2]) end\n"
      "    if my_ttl == '0' then redis.call('SET', KEYS[1], my_token)\n"
      "    else redis.call('SET', KEYS[1], my_token, 'PX', my_ttl) end\n"
      "    local fence = 0\n"
      "    if my_fenced == '1' then fence = redis.call('INCR', KEYS[3]) end\n"
      "    return {1, fence}\n"
      "  end\n"
      "end\n"
      "if ARGV[2] == '1' then\n"
      "  redis.call('RPUSH', KEYS[2], ARGV[1])\n"
      "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
      "elseif not redis.call('LPOS', KEYS[2], ARGV[1]) then\n"
      // Dropped while its process was unreachable: back in line.
      "  redis.call('RPUSH', KEYS[2], ARGV[1])\n"
      "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
      "end\n"
      "return {0, redis.call('PTTL', KEYS[1])}\n");
  return script;
}

const Script& release() {
  static const Script script(
      LOCKON_LUA_HAND_OVER
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "hand_over()\n"
      "return 1\n");
  return script;
}

const Script& extend() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "local pttl = redis.call('PTTL', KEYS[1])\n"
      "if pttl < 0 then return -1 end\n"
      "local ttl = tonumber(ARGV[2])\n"
      "if ARGV[3] == '0' then ttl = ttl + pttl end\n"
      "redis.call('PEXPIRE', KEYS[1], ttl)\n"
      "return 1\n");
  return script;
}

const Script& renew() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      // GT: the watchdog never shortens a lease the owner extended by hand.
      "if ARGV[3] == '1' then redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')\n"
      "else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
      "return 1\n");
  return script;
}

const Script& cancel_wait() {
  static const Script script(
      LOCKON_LUA_HAND_OVER LOCKON_LUA_MY_ENTRY
      "redis.call('LREM', KEYS[2], 1, ARGV[1])\n"
      // Handed K just as we gave up: pass it on rather than sit on it.
      "if redis.call('GET', KEYS[1]) == my_token then\n"
      "  hand_over()\n"
      "  return 1\n"
      "end\n"
      "return 0\n");
  return script;
}

#undef LOCKON_LUA_MY_ENTRY
#undef LOCKON_LUA_HAND_OVER

}  // namespace scripts
}  // namespace lockon::detail
