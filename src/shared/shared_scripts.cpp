#include "shared/shared_scripts.hpp"

#include <string>

#include "common/token.hpp"

namespace lockon::detail::shared_scripts {
namespace {

// Common prelude: the server's clock in ms, expired shares dropped, and the
// helpers every script uses. Lua numbers are doubles: ms since 1970 (~2^41)
// are exact; string.format('%.0f') keeps them out of exponent notation.
#define LOCKON_LUA_SHARED_PRELUDE                                                                   \
  "local t = redis.call('TIME')\n"                                                                  \
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                         \
  "local limit = tonumber(ARGV[2])\n"                                                               \
  "local publish_denied = 0\n"                                                                      \
  "local pruned = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))\n"    \
  /* KEYS[3]: share -> the process (subscriber id) a hand-over granted it to, */                    \
  /* kept two leases. Such a share gone from KEYS[1] without a release or  */                       \
  /* cancel (which delete its record) lapsed: that process is paused or     */                      \
  /* gone, and its queued entries are dropped (they queue again, at the     */                      \
  /* tail, when it runs), so it is not granted one more lease per waiter    */                      \
  /* (the Lock's drop_lapsed). Looked up by membership, not by this call's  */                      \
  /* pruning: KEYS[1] itself may have expired with its last share. An entry */                      \
  /* caller (ARGV[3]) is evidently running, and so is its whole process:   */                      \
  /* entries are matched by process (same_process: any of its subscribers). */                      \
  LOCKON_LUA_SAME_PROCESS                                                                           \
  "local function keep_handed(ttl)\n"                                                               \
  "  local want = 2 * tonumber(ttl)\n"                                                              \
  "  if redis.call('PTTL', KEYS[3]) < want then redis.call('PEXPIRE', KEYS[3], want) end\n"         \
  "end\n"                                                                                           \
  "if redis.call('EXISTS', KEYS[3]) == 1 then\n"                                                    \
  "  local caller = string.match(ARGV[3] or '', '^([^|]*)|')\n"                                     \
  "  local handed = redis.call('HGETALL', KEYS[3])\n"                                               \
  "  for i = 1, #handed, 2 do\n"                                                                    \
  "    if not redis.call('ZSCORE', KEYS[1], handed[i]) then\n"                                      \
  "      redis.call('HDEL', KEYS[3], handed[i])\n"                                                  \
  "      if not same_process(handed[i + 1], caller) then\n"                                        \
  "        for _, e in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do\n"                           \
  "          if same_process(string.match(e, '^([^|]*)|'), handed[i + 1]) then\n"                   \
  "            redis.call('LREM', KEYS[2], 1, e)\n"                                                 \
  "          end\n"                                                                                 \
  "        end\n"                                                                                   \
  "      end\n"                                                                                     \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "end\n"                                                                                           \
  "local function parse(entry)\n"                                                                   \
  "  return string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n"                        \
  "end\n"                                                                                           \
  /* A writer holds alone, so the lowest-scored member tells whether one holds. */                  \
  "local function fits(kind)\n"                                                                     \
  "  local n = redis.call('ZCARD', KEYS[1])\n"                                                      \
  "  if n == 0 then return true end\n"                                                              \
  "  if kind == 'x' then return false end\n"                                                        \
  "  if kind == 'p' then return n < limit end\n"                                                    \
  "  local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]\n"                                        \
  "  return string.sub(first, 1, 2) ~= 'x:'\n"                                                      \
  "end\n"                                                                                           \
  /* The holders' key outlives its longest share. */                                                \
  "local function hold(member, ttl)\n"                                                              \
  "  if redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ttl)), member) == 1\n"     \
  "     and redis.call('ZCARD', KEYS[1]) == 1 then\n"                                               \
  "    redis.call('PEXPIRE', KEYS[1], ttl)\n"                                                       \
  "  else\n"                                                                                        \
  "    redis.call('PEXPIRE', KEYS[1], ttl, 'GT')\n"                                                 \
  "  end\n"                                                                                         \
  "end\n"                                                                                           \
  /* Grants the head of the queue while it fits (bounded per call). */                              \
  "local function grant_heads()\n"                                                                  \
  "  local granted = false\n"                                                                       \
  "  for _ = 1, 1000 do\n"                                                                          \
  "    local head = redis.call('LINDEX', KEYS[2], 0)\n"                                             \
  "    if not head then return granted, true end\n"                                                 \
  "    local sid, wid, ttl, kind, token = parse(head)\n"                                            \
  "    if token and not fits(kind) then return granted, false end\n"                                \
  "    redis.call('LPOP', KEYS[2])\n"                                                               \
  "    if token then\n"                                                                             \
  "      hold(kind .. ':' .. token, ttl)\n"                                                         \
  "      local heard = redis.pcall('PUBLISH', ARGV[1] .. sid, wid .. ' 0')\n"                       \
  "      if type(heard) ~= 'number' then publish_denied = 1 heard = 0 end\n"                        \
  "      if heard == 0 then redis.call('ZREM', KEYS[1], kind .. ':' .. token)\n"                     \
  "      else\n"                                                                                    \
  "        granted = true\n"                                                                        \
  "        redis.call('HSET', KEYS[3], kind .. ':' .. token, sid)\n"                                \
  "        keep_handed(ttl)\n"                                                                      \
  "      end\n"                                                                                     \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "  return granted, false\n"                                                                      \
  "end\n"

std::string with_publish(std::string body, bool sharded) {
  if (!sharded) return body;
  const std::string from = "redis.pcall('PUBLISH'";
  for (auto at = body.find(from); at != std::string::npos; at = body.find(from, at + 1))
    body.replace(at, from.size(), "redis.pcall('SPUBLISH'");
  return body;
}


}  // namespace

#define LOCKON_SHARED_SCRIPT(body)                                 \
  static const Script plain(with_publish(body, false));            \
  static const Script spublish(with_publish(body, true));          \
  return sharded ? spublish : plain

const Script& attempt(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      "local sid, wid, ttl, kind, token = parse(ARGV[3])\n"
      "local me = kind .. ':' .. token\n"
      // ARGV[6] '1': a caller-chosen token, which does not end in the
      // process nonce, so no queueing lookup can tell it is this process's.
      // It is recorded as a hand-over's is, atomically with the grant: if it
      // lapses unreleased, the process's queued entries are dropped.
      "local function granted()\n"
      "  hold(me, ttl)\n"
      "  if ARGV[6] == '1' and sid ~= '-' then\n"
      "    redis.call('HSET', KEYS[3], me, sid)\n"
      "    keep_handed(ttl)\n"
      "  end\n"
      "  return {1, 0, publish_denied}\n"
      "end\n"
      // Handed to us already (a wake-up we have not read yet, or the reply
      // to an earlier attempt was lost): restart the lease from now.
      // (Mode "0" is a first attempt with a fresh token: never held, never queued.)
      "local fresh = ARGV[4] == '0'\n"
      "if not fresh and redis.call('ZSCORE', KEYS[1], me) then return granted() end\n"
      "local handed, empty = grant_heads()\n"
      "if handed and not fresh and redis.call('ZSCORE', KEYS[1], me) then return granted() end\n"
      "local queued = not fresh and redis.call('LPOS', KEYS[2], ARGV[3])\n"
      "if not queued and empty and fits(kind) then return granted() end\n"
      // Entering the queue behind shares of our own process (their tokens
      // end in our subscriber id's nonce; taken directly, so no hand-over
      // recorded them): they are recorded as our process's, as a hand-over
      // is, so if one lapses unreleased (our process paused) our queued
      // entries are dropped instead of each being granted one more lease.
      // Looked up here, atomically, not named by the caller: a thread's
      // share granted a moment ago may not be in any registry of its
      // process yet. Once suffices: while we are queued nobody takes the
      // name directly (that needs an empty queue); an entry dropped comes
      // back through here. Our own share is not among them (a handed entry
      // returned above). Bounded: among the 1,024 earliest-ending shares,
      // at most 16 are named (each record costs every script a ZSCORE
      // while it lasts; paused, all of a process's shares lapse, and the
      // first named one to go is enough).
      "if not queued and ARGV[4] ~= '0' then\n"
      "  redis.call('RPUSH', KEYS[2], ARGV[3])\n"
      "  local named = 0\n"
      "  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, 1023)) do\n"
      "    if named == 16 then break end\n"
      "    if same_process(m, sid) then\n"
      "      redis.call('HSET', KEYS[3], m, sid)\n"
      "      named = named + 1\n"
      "    end\n"
      "  end\n"
      "  if named > 0 then keep_handed(ttl) end\n"
      "end\n"
      "if ARGV[4] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end\n"
      "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
      "local wait = -1\n"
      "if first[2] then wait = tonumber(first[2]) - now end\n"
      "return {0, wait, publish_denied}\n");
}

const Script& release(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      "local removed = redis.call('ZREM', KEYS[1], ARGV[3])\n"
      "redis.call('HDEL', KEYS[3], ARGV[3])\n"
      "grant_heads()\n"
      "return {removed, publish_denied}\n");
}

const Script& cancel(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      "local sid, wid, ttl, kind, token = parse(ARGV[3])\n"
      "redis.call('LREM', KEYS[2], 1, ARGV[3])\n"
      "local held = 0\n"
      "if token then\n"
      "  held = redis.call('ZREM', KEYS[1], kind .. ':' .. token)\n"
      "  redis.call('HDEL', KEYS[3], kind .. ':' .. token)\n"
      "end\n"
      "grant_heads()\n"
      "return held\n");
}

const Script& renew(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      // Expired shares were just dropped: their room goes to the waiters.
      "if pruned > 0 then grant_heads() end\n"
      "if not redis.call('ZSCORE', KEYS[1], ARGV[3]) then return 0 end\n"
      "hold(ARGV[3], ARGV[4])\n"
      "if redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then keep_handed(ARGV[4]) end\n"
      "return 1\n");
}

#undef LOCKON_SHARED_SCRIPT
#undef LOCKON_LUA_SHARED_PRELUDE

}  // namespace lockon::detail::shared_scripts
