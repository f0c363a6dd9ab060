// The Lock's hand-over scripts (wait_attempt, release, cancel_wait) stage
// their removals, as the shared scripts do (shared/shared_scripts.cpp):
// nothing is deleted before the script's end. A key emptied or deleted
// mid-script is one the node no longer has, and on a slot being migrated
// away (Redis Cluster, MIGRATING) Redis refuses a script any later access
// to it ("Script attempted to access a non local key"): the script failed
// half-done (issue 33: a release that handed K to a waiter gone, deleted
// the holder record, then could not write the next waiter's). The script
// runs there only when the node has all its keys, so touching nothing it
// may have deleted is enough.
//
// Staged: the lock, hand-over record, holder record and hand-over
// subscriber keys (KEYS 1, 4, 5, 7: `gone`), the queue's popped and
// removed entries, the queued holders' records' removed fields. Every read
// leaves them out; finish(r) applies them, each key's last commands, and
// returns r. A command touches one key (on the importing node a command
// over several keys, one of them missing, is refused too) and is one the
// scripts used before (README's ACL rules stay sufficient). Queue entries
// are unique (a waiter queues only if LPOS does not find its entry), so an
// entry removed by value is the only one with that value.
#pragma once

// Applies a script's staged removals from `key`: `command` (LREM, HDEL,
// ZREM) for each member of `list` still in `set` (once each), LREM one per
// command, the others up to 1,000 per command. Only the last command can
// empty the key (each earlier one leaves the members of the later ones), so
// none touches it after it may be deleted. Commands the scripts used before
// staging (a restricted ACL user keeps working: README's ACL rules).
#define LOCKON_LUA_REMOVE_STAGED                                                                    \
  "local function remove_staged(command, key, list, set)\n"                                         \
  "  local batch = {}\n"                                                                            \
  "  for _, m in ipairs(list) do\n"                                                                 \
  "    if set[m] then set[m] = nil batch[#batch + 1] = m end\n"                                     \
  "  end\n"                                                                                         \
  "  local per = command == 'LREM' and 1 or 1000\n"                                                 \
  "  for from = 1, #batch, per do\n"                                                                \
  "    if command == 'LREM' then redis.call('LREM', key, 1, batch[from])\n"                          \
  "    else redis.call(command, key, unpack(batch, from, math.min(from + per - 1, #batch))) end\n"  \
  "  end\n"                                                                                         \
  "end\n"

#define LOCKON_LUA_LOCK_STAGE                                                                       \
  "local gone = {}\n"                                                                               \
  "local function get(i)\n"                                                                         \
  "  if gone[i] then return false end\n"                                                            \
  "  return redis.call('GET', KEYS[i])\n"                                                           \
  "end\n"                                                                                           \
  "local function set(i, ...)\n"                                                                    \
  "  gone[i] = nil\n"                                                                               \
  "  return redis.call('SET', KEYS[i], ...)\n"                                                      \
  "end\n"                                                                                           \
  "local function del(i) gone[i] = true end\n"                                                      \
  "local function pexpire(i, ms)\n"                                                                 \
  "  if not gone[i] then redis.call('PEXPIRE', KEYS[i], ms) end\n"                                  \
  "end\n"                                                                                           \
  "local function ttl_left(i)\n"                                                                    \
  "  if gone[i] then return -2 end\n"                                                               \
  "  return redis.call('PTTL', KEYS[i])\n"                                                          \
  "end\n"                                                                                           \
  /* The queue (KEYS[2]): its first q_popped entries and those in q_out are gone. */                \
  "local q_popped, q_out, q_list, q_outn = 0, {}, {}, 0\n"                                          \
  "local function q_head()\n"                                                                       \
  "  while true do\n"                                                                               \
  "    local e = redis.call('LINDEX', KEYS[2], q_popped)\n"                                         \
  "    if not e or not q_out[e] then return e end\n"                                                \
  "    q_out[e] = nil q_outn = q_outn - 1 q_popped = q_popped + 1\n"                                \
  "  end\n"                                                                                         \
  "end\n"                                                                                           \
  "local function q_pop()\n"                                                                        \
  "  local e = q_head()\n"                                                                          \
  "  if e then q_popped = q_popped + 1 end\n"                                                       \
  "  return e\n"                                                                                    \
  "end\n"                                                                                           \
  "local function q_entries()\n"                                                                    \
  "  local out = {}\n"                                                                              \
  "  for _, e in ipairs(redis.call('LRANGE', KEYS[2], q_popped, -1)) do\n"                          \
  "    if not q_out[e] then out[#out + 1] = e end\n"                                                \
  "  end\n"                                                                                         \
  "  return out\n"                                                                                  \
  "end\n"                                                                                           \
  /* LPOS: e's index in the queue, or false. */                                                     \
  "local function q_pos(e)\n"                                                                       \
  "  if q_out[e] then return false end\n"                                                           \
  "  local at = redis.call('LPOS', KEYS[2], e)\n"                                                   \
  "  if not at or at < q_popped then return false end\n"                                            \
  "  local pos = at - q_popped\n"                                                                   \
  "  if q_outn > 0 and at > q_popped then\n"                                                        \
  "    for _, x in ipairs(redis.call('LRANGE', KEYS[2], q_popped, at - 1)) do\n"                    \
  "      if q_out[x] then pos = pos - 1 end\n"                                                      \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "  return pos\n"                                                                                  \
  "end\n"                                                                                           \
  /* LREM 1; `known`: e is queued (q_entries() listed it). */                                       \
  "local function q_remove(e, known)\n"                                                             \
  "  if not known and not q_pos(e) then return end\n"                                               \
  "  q_out[e] = true q_list[#q_list + 1] = e q_outn = q_outn + 1\n"                                 \
  "end\n"                                                                                           \
  /* RPUSH: the queue's length. */                                                                  \
  "local function q_push(e)\n"                                                                      \
  "  return redis.call('RPUSH', KEYS[2], e) - q_popped - q_outn\n"                                  \
  "end\n"                                                                                           \
  /* The queued holders' records (KEYS[6]): fields in qw_out are gone. */                           \
  "local qw_out, qw_list = {}, {}\n"                                                                \
  "local function qw_get(f)\n"                                                                      \
  "  if qw_out[f] then return false end\n"                                                          \
  "  return redis.call('HGET', KEYS[6], f)\n"                                                       \
  "end\n"                                                                                           \
  "local function qw_del(f)\n"                                                                      \
  "  if qw_out[f] or not redis.call('HGET', KEYS[6], f) then return end\n"                          \
  "  qw_out[f] = true qw_list[#qw_list + 1] = f\n"                                                 \
  "end\n"                                                                                           \
  /* HSETNX. A field this script removed is kept, with its value: the   */                         \
  /* record of the same waiter, which this script no longer removes.    */                         \
  "local function qw_setnx(f, v)\n"                                                                 \
  "  if not qw_out[f] then return redis.call('HSETNX', KEYS[6], f, v) end\n"                        \
  "  qw_out[f] = nil\n"                                                                             \
  "  return 0\n"                                                                                    \
  "end\n"                                                                                           \
  LOCKON_LUA_REMOVE_STAGED                                                                          \
  "local function finish(r)\n"                                                                      \
  "  for _, i in ipairs({1, 4, 5, 7}) do\n"                                                         \
  "    if gone[i] then redis.call('DEL', KEYS[i]) end\n"                                            \
  "  end\n"                                                                                         \
  /* The removed entries first: the popped ones, still at the head, keep */                         \
  /* the queue from emptying before its last command.                    */                         \
  "  remove_staged('LREM', KEYS[2], q_list, q_out)\n"                                               \
  "  if q_popped > 0 then redis.call('LPOP', KEYS[2], q_popped) end\n"                              \
  "  remove_staged('HDEL', KEYS[6], qw_list, qw_out)\n"                                             \
  "  return r\n"                                                                                    \
  "end\n"
