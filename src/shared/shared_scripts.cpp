#include "shared/shared_scripts.hpp"

#include <string>

#include "common/token.hpp"
#include "protocol/lock_script_stage.hpp"

namespace lockon::detail::shared_scripts {
namespace {

// Common prelude: the server's clock in ms, the helpers every script uses,
// and finish(), which every script returns through. Lua numbers are
// doubles: ms since 1970 (~2^41) are exact; string.format('%.0f') keeps them
// out of exponent notation.
//
// Nothing is removed from a key before the script's end (finish): a key
// emptied mid-script is deleted, and on a slot being migrated away (Redis
// Cluster, MIGRATING) Redis refuses a script any later access to a key it
// no longer has ("Script attempted to access a non local key"), so the
// script would fail half-done (issue 33: a release that had removed its
// share, then failed to hand it over). The script runs there only if it
// has all three keys, so touching nothing it may have deleted is enough.
// Removals are staged instead (the members, entries and fields the script
// removed, and the expired shares), every read leaves them out, and
// finish() applies them, each key's last commands (lock_script_stage.hpp's
// remove_staged: only the last can empty the key). The end state and the
// replies are those of removing at once.
// Queue entries are unique (a waiter queues only if LPOS does not find its
// entry), so an entry removed by value is the only one with that value.
#define LOCKON_LUA_SHARED_PRELUDE                                                                   \
  "local t = redis.call('TIME')\n"                                                                  \
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                         \
  "local now_text = string.format('%.0f', now)\n"                                                   \
  "local limit = tonumber(ARGV[2])\n"                                                               \
  "local publish_denied = 0\n"                                                                      \
  /* KEYS[1], the holders. A share holds while its score is after now and */                        \
  /* the script did not remove it (sh_out; applied by finish, with the     */                       \
  /* expired ones: `pruned` of them).                                       */                      \
  "local pruned = redis.call('ZCOUNT', KEYS[1], '-inf', now_text)\n"                                \
  "local sh_out, sh_list, sh_outn = {}, {}, 0\n"                                                    \
  "local function share(m)\n"                                                                       \
  "  if sh_out[m] then return false end\n"                                                          \
  "  local s = redis.call('ZSCORE', KEYS[1], m)\n"                                                  \
  "  return s ~= false and tonumber(s) > now\n"                                                     \
  "end\n"                                                                                           \
  "local function live()\n"                                                                         \
  "  return redis.call('ZCOUNT', KEYS[1], '(' .. now_text, '+inf') - sh_outn\n"                     \
  "end\n"                                                                                           \
  /* The n earliest-ending shares: members, and their scores. */                                    \
  "local function earliest(n)\n"                                                                    \
  "  local members, scores = {}, {}\n"                                                              \
  "  local r = redis.call('ZRANGE', KEYS[1], '(' .. now_text, '+inf', 'BYSCORE', 'LIMIT', 0, n + sh_outn, 'WITHSCORES')\n" \
  "  for i = 1, #r, 2 do\n"                                                                         \
  "    if #members == n then break end\n"                                                           \
  "    if not sh_out[r[i]] then members[#members + 1] = r[i] scores[#scores + 1] = r[i + 1] end\n"  \
  "  end\n"                                                                                         \
  "  return members, scores\n"                                                                      \
  "end\n"                                                                                           \
  /* ZREM: 1 if m held. */                                                                          \
  "local function drop_share(m)\n"                                                                  \
  "  if not share(m) then return 0 end\n"                                                           \
  "  sh_out[m] = true sh_list[#sh_list + 1] = m sh_outn = sh_outn + 1\n"                            \
  "  return 1\n"                                                                                    \
  "end\n"                                                                                           \
  /* KEYS[2], the queue: its first sq_popped entries and those in sq_out */                         \
  /* are gone.                                                          */                          \
  "local sq_popped, sq_out, sq_list = 0, {}, {}\n"                                                  \
  "local function queue_head()\n"                                                                   \
  "  while true do\n"                                                                               \
  "    local e = redis.call('LINDEX', KEYS[2], sq_popped)\n"                                        \
  "    if not e or not sq_out[e] then return e end\n"                                               \
  "    sq_out[e] = nil sq_popped = sq_popped + 1\n"                                                \
  "  end\n"                                                                                         \
  "end\n"                                                                                           \
  "local function queue_entries()\n"                                                                \
  "  local out = {}\n"                                                                              \
  "  for _, e in ipairs(redis.call('LRANGE', KEYS[2], sq_popped, -1)) do\n"                         \
  "    if not sq_out[e] then out[#out + 1] = e end\n"                                               \
  "  end\n"                                                                                         \
  "  return out\n"                                                                                  \
  "end\n"                                                                                           \
  "local function in_queue(e)\n"                                                                    \
  "  if sq_out[e] then return false end\n"                                                          \
  "  local at = redis.call('LPOS', KEYS[2], e)\n"                                                   \
  "  return at ~= false and at >= sq_popped\n"                                                      \
  "end\n"                                                                                           \
  /* LREM 1; `known`: e is queued (queue_entries() listed it). */                                   \
  "local function queue_remove(e, known)\n"                                                         \
  "  if not known and not in_queue(e) then return end\n"                                            \
  "  sq_out[e] = true sq_list[#sq_list + 1] = e\n"                                                 \
  "end\n"                                                                                           \
  /* KEYS[3], the hand-over record: fields in hs_out are gone; hs_n      */                         \
  /* fields are left (counted by the prelude's HGETALL). hs_fresh:       */                         \
  /* written while (as the script left it) empty, i.e. created anew, so  */                         \
  /* keep_handed sets its TTL whatever the old key's was.                */                         \
  "local hs_out, hs_list, hs_n, hs_fresh = {}, {}, 0, false\n"                                      \
  "local function recorded(m)\n"                                                                    \
  "  return not hs_out[m] and redis.call('HEXISTS', KEYS[3], m) == 1\n"                             \
  "end\n"                                                                                           \
  /* HDEL; `known`: m is a field (listed by HGETALL). */                                            \
  "local function unrecord(m, known)\n"                                                             \
  "  if not known and not recorded(m) then return end\n"                                            \
  "  hs_out[m] = true hs_list[#hs_list + 1] = m hs_n = hs_n - 1\n"                                  \
  "end\n"                                                                                           \
  "local function record(m, sid)\n"                                                                 \
  "  if hs_n == 0 then hs_fresh = true end\n"                                                       \
  "  local added = redis.call('HSET', KEYS[3], m, sid)\n"                                           \
  "  if hs_out[m] then hs_out[m] = nil added = 1 end\n"                                             \
  "  hs_n = hs_n + added\n"                                                                         \
  "end\n"                                                                                           \
  "local function keep_handed(ttl)\n"                                                               \
  "  local want = 2 * tonumber(ttl)\n"                                                              \
  "  if hs_fresh or redis.call('PTTL', KEYS[3]) < want then redis.call('PEXPIRE', KEYS[3], want) end\n" \
  "  hs_fresh = false\n"                                                                            \
  "end\n"                                                                                           \
  /* Applies the staged removals and returns r: each key's last commands, */                      \
  /* of which only the last can empty it (remove_staged). The expired    */                         \
  /* shares go first: the removed ones are held, so they keep {K}:sh.    */                         \
  LOCKON_LUA_REMOVE_STAGED                                                                          \
  "local function finish(r)\n"                                                                      \
  "  if pruned > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_text) end\n"            \
  "  remove_staged('ZREM', KEYS[1], sh_list, sh_out)\n"                                             \
  "  remove_staged('LREM', KEYS[2], sq_list, sq_out)\n"                                             \
  "  if sq_popped > 0 then redis.call('LPOP', KEYS[2], sq_popped) end\n"                            \
  "  remove_staged('HDEL', KEYS[3], hs_list, hs_out)\n"                                             \
  "  return r\n"                                                                                    \
  "end\n"                                                                                           \
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
  "if redis.call('EXISTS', KEYS[3]) == 1 then\n"                                                    \
  "  local caller = string.match(ARGV[3] or '', '^([^|]*)|')\n"                                     \
  "  local handed = redis.call('HGETALL', KEYS[3])\n"                                               \
  "  hs_n = #handed / 2\n"                                                                          \
  "  for i = 1, #handed, 2 do\n"                                                                    \
  "    if not share(handed[i]) then\n"                                                              \
  "      unrecord(handed[i], true)\n"                                                               \
  "      if not same_process(handed[i + 1], caller) then\n"                                        \
  "        for _, e in ipairs(queue_entries()) do\n"                                                \
  "          if same_process(string.match(e, '^([^|]*)|'), handed[i + 1]) then\n"                   \
  "            queue_remove(e, true)\n"                                                             \
  "          end\n"                                                                                 \
  "        end\n"                                                                                   \
  "      end\n"                                                                                     \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "end\n"                                                                                           \
  "local function parse(entry)\n"                                                                   \
  "  return string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n"                        \
  "end\n"                                                                                           \
  /* A writer holds alone, so the earliest-ending share tells whether one holds. */                 \
  "local function fits(kind)\n"                                                                     \
  "  local n = live()\n"                                                                            \
  "  if n == 0 then return true end\n"                                                              \
  "  if kind == 'x' then return false end\n"                                                        \
  "  if kind == 'p' then return n < limit end\n"                                                    \
  "  local first = earliest(1)[1]\n"                                                                \
  "  return string.sub(first, 1, 2) ~= 'x:'\n"                                                      \
  "end\n"                                                                                           \
  /* The holders' key outlives its longest share; the first share of an */                          \
  /* empty key sets its TTL.                                            */                          \
  "local function hold(member, ttl)\n"                                                              \
  "  local first = live() == 0\n"                                                                   \
  "  if sh_out[member] then sh_out[member] = nil sh_outn = sh_outn - 1 end\n"                       \
  "  redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ttl)), member)\n"             \
  "  if first then redis.call('PEXPIRE', KEYS[1], ttl)\n"                                           \
  "  else redis.call('PEXPIRE', KEYS[1], ttl, 'GT') end\n"                                          \
  "end\n"                                                                                           \
  /* Grants the head of the queue while it fits (bounded per call). */                              \
  "local function grant_heads()\n"                                                                  \
  "  local granted = false\n"                                                                       \
  "  for _ = 1, 1000 do\n"                                                                          \
  "    local head = queue_head()\n"                                                                 \
  "    if not head then return granted, true end\n"                                                 \
  "    local sid, wid, ttl, kind, token = parse(head)\n"                                            \
  "    if token and not fits(kind) then return granted, false end\n"                                \
  "    sq_popped = sq_popped + 1\n"                                                                 \
  "    if token then\n"                                                                             \
  "      hold(kind .. ':' .. token, ttl)\n"                                                         \
  "      local heard = redis.pcall('PUBLISH', ARGV[1] .. sid, wid .. ' 0')\n"                       \
  "      if type(heard) ~= 'number' then publish_denied = 1 heard = 0 end\n"                        \
  "      if heard == 0 then drop_share(kind .. ':' .. token)\n"                                      \
  "      else\n"                                                                                    \
  "        granted = true\n"                                                                        \
  "        record(kind .. ':' .. token, sid)\n"                                                     \
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
      "    record(me, sid)\n"
      "    keep_handed(ttl)\n"
      "  end\n"
      "  return finish({1, 0, publish_denied})\n"
      "end\n"
      // Handed to us already (a wake-up we have not read yet, or the reply
      // to an earlier attempt was lost): restart the lease from now.
      // (Mode "0" is a first attempt with a fresh token: never held, never queued.)
      "local fresh = ARGV[4] == '0'\n"
      "if not fresh and share(me) then return granted() end\n"
      "local handed, empty = grant_heads()\n"
      "if handed and not fresh and share(me) then return granted() end\n"
      "local queued = not fresh and in_queue(ARGV[3])\n"
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
      "  for _, m in ipairs((earliest(1024))) do\n"
      "    if named == 16 then break end\n"
      "    if same_process(m, sid) then\n"
      "      record(m, sid)\n"
      "      named = named + 1\n"
      "    end\n"
      "  end\n"
      "  if named > 0 then keep_handed(ttl) end\n"
      "end\n"
      "if ARGV[4] ~= '0' then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end\n"
      "local _, first = earliest(1)\n"
      "local wait = -1\n"
      "if first[1] then wait = tonumber(first[1]) - now end\n"
      "return finish({0, wait, publish_denied})\n");
}

const Script& release(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      "local removed = drop_share(ARGV[3])\n"
      "unrecord(ARGV[3])\n"
      "grant_heads()\n"
      "return finish({removed, publish_denied})\n");
}

const Script& cancel(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      "local sid, wid, ttl, kind, token = parse(ARGV[3])\n"
      "queue_remove(ARGV[3])\n"
      "local held = 0\n"
      "if token then\n"
      "  held = drop_share(kind .. ':' .. token)\n"
      "  unrecord(kind .. ':' .. token)\n"
      "end\n"
      "grant_heads()\n"
      "return finish(held)\n");
}

const Script& renew(bool sharded) {
  LOCKON_SHARED_SCRIPT(
      LOCKON_LUA_SHARED_PRELUDE
      // Expired shares were just dropped: their room goes to the waiters.
      "if pruned > 0 then grant_heads() end\n"
      "if not share(ARGV[3]) then return finish(0) end\n"
      "hold(ARGV[3], ARGV[4])\n"
      "if recorded(ARGV[3]) then keep_handed(ARGV[4]) end\n"
      "return finish(1)\n");
}

#undef LOCKON_SHARED_SCRIPT
#undef LOCKON_LUA_SHARED_PRELUDE

}  // namespace lockon::detail::shared_scripts
