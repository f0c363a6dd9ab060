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

std::string wake_channel(std::string_view key) {
  std::string out("lockon:wake:");
  out.append(key);
  return out;
}

namespace scripts {
namespace {

// Lua shared by release and cancel_wait: gives the lock to the first waiter
// whose queue entry is still alive (popping dead ones), as a short
// reservation only that waiter's acquire can turn into a lease; newcomers'
// SET NX fails meanwhile, so they cannot barge in. Without a live waiter the
// key is deleted. KEYS[1..3] = lock, queue, deadlines.
#define LOCKON_LUA_HAND_OVER                                                       \
  "local function hand_over(channel, reserve_ms)\n"                                \
  "  local head = redis.call('LINDEX', KEYS[2], 0)\n"                              \
  "  if head then\n"                                                               \
  "    local t = redis.call('TIME')\n"                                             \
  "    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"    \
  "    while head do\n"                                                            \
  "      local deadline = tonumber(redis.call('HGET', KEYS[3], head))\n"           \
  "      redis.call('LPOP', KEYS[2])\n"                                            \
  "      redis.call('HDEL', KEYS[3], head)\n"                                      \
  "      if deadline and deadline > now then break end\n"                          \
  "      head = redis.call('LINDEX', KEYS[2], 0)\n"                                \
  "    end\n"                                                                      \
  "  end\n"                                                                        \
  "  if head then\n"                                                               \
  "    redis.call('SET', KEYS[1], 'lockon-reserved:' .. head, 'PX', reserve_ms)\n" \
  "    redis.call('PUBLISH', channel, head)\n"                                     \
  "  else\n"                                                                       \
  "    redis.call('DEL', KEYS[1])\n"                                               \
  "  end\n"                                                                        \
  "end\n"

}  // namespace

const Script& acquire() {
  static const Script script(
      // GET first: a key of another type fails here with WRONGTYPE instead
      // of being mistaken for a held lock.
      "local holder = redis.call('GET', KEYS[1])\n"
      "local me = ARGV[3]\n"
      "local reserved = me ~= '' and holder == 'lockon-reserved:' .. me\n"
      "local ahead = false\n"
      "if not holder then\n"
      // A free lock with a live waiter first in line is that waiter's.
      "  local head = redis.call('LINDEX', KEYS[2], 0)\n"
      "  if head then\n"
      "    local t = redis.call('TIME')\n"
      "    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "    while head and head ~= me do\n"
      "      local deadline = tonumber(redis.call('HGET', KEYS[3], head))\n"
      "      if deadline and deadline > now then break end\n"
      "      redis.call('LPOP', KEYS[2])\n"
      "      redis.call('HDEL', KEYS[3], head)\n"
      "      head = redis.call('LINDEX', KEYS[2], 0)\n"
      "    end\n"
      "    ahead = head and head ~= me\n"
      "  end\n"
      "end\n"
      "if reserved or (not holder and not ahead) then\n"
      "  local ttl = tonumber(ARGV[2])\n"
      "  if ttl > 0 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)\n"
      "  else redis.call('SET', KEYS[1], ARGV[1]) end\n"
      "  if me ~= '' and redis.call('HDEL', KEYS[3], me) == 1 then redis.call('LREM', KEYS[2], 1, me) end\n"
      "  local fence = 0\n"
      "  if ARGV[5] == '1' then fence = redis.call('INCR', KEYS[4]) end\n"
      "  return {1, fence}\n"
      "end\n"
      "if me ~= '' then\n"
      "  local t = redis.call('TIME')\n"
      "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "  local lease = tonumber(ARGV[4])\n"
      "  if redis.call('HSET', KEYS[3], me, now + lease) == 1 then redis.call('RPUSH', KEYS[2], me) end\n"
      // Queue keys vanish on their own if every waiter disappears.
      "  redis.call('PEXPIRE', KEYS[2], lease * 2)\n"
      "  redis.call('PEXPIRE', KEYS[3], lease * 2)\n"
      "end\n"
      "if holder then return {0, redis.call('PTTL', KEYS[1])} end\n"
      "return {0, -2}\n");
  return script;
}

const Script& release() {
  static const Script script(
      LOCKON_LUA_HAND_OVER
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "hand_over(ARGV[2], ARGV[3])\n"
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
      LOCKON_LUA_HAND_OVER
      "if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then redis.call('LREM', KEYS[2], 1, ARGV[1]) end\n"
      // Handed the lock just as we gave up: pass it on rather than sit on it.
      "if redis.call('GET', KEYS[1]) == 'lockon-reserved:' .. ARGV[1] then hand_over(ARGV[2], ARGV[3]) end\n"
      "return 1\n");
  return script;
}

#undef LOCKON_LUA_HAND_OVER

}  // namespace scripts
}  // namespace lockon::detail
