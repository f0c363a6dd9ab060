#include "protocol/lock_scripts.hpp"
#include "protocol/lock_script_stage.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "client/client_impl.hpp"
#include "client/slots.hpp"
#include "common/token.hpp"
#include "lockon/lock.hpp"

namespace lockon::detail {

std::string companion_key(std::string_view key, std::string_view suffix) {
  // Same slot as K under Redis's hash-tag rule (client/slots.hpp):
  //   K has a non-empty tag: K:suffix (appending keeps that tag);
  //   K has no '}' (and is not empty): {K}:suffix hashes exactly K;
  //   otherwise ("a{}b", "}x{y"): wrapping K would end the tag at K's own
  //   '}', so a brace-free text with K's slot is the tag: {T}K:suffix.
  std::string out;
  out.reserve(key.size() + suffix.size() + 12);
  if (has_hash_tag(key)) {
    out.append(key);
  } else if (!key.empty() && key.find('}') == std::string_view::npos) {
    out.append("{").append(key).append("}");
  } else {
    out.append("{").append(tag_for_slot(key_slot(key))).append("}").append(key);
  }
  out.append(":").append(suffix);
  return out;
}

LockScriptKeys lock_script_keys(std::string_view key) {
  return {std::string(key),         companion_key(key, "q"),    companion_key(key, "fence"),
          companion_key(key, "hf"), companion_key(key, "who"),  companion_key(key, "qwho"),
          companion_key(key, "hs")};
}

bool sharded_wake(const ClientImpl& client) noexcept {
  return client.options().deployment == Deployment::cluster;
}

std::string wake_channel(std::string_view key, std::string_view subscriber_id) {
  std::string suffix("wake:");
  suffix.append(subscriber_id);
  return companion_key(key, suffix);
}

namespace scripts {
namespace {

// Fences: never below the server's clock in microseconds, and above the
// counter's last value. An emptied counter (restart without persistence,
// failover to a replica that missed the last INCR, the counter's own expiry)
// therefore restarts above every fence handed out before, as long as the
// server clock does not step back by more than the time since the last
// fence. The counter expires an hour after its last use (it used to live
// forever: one key per lock_on argument tuple). Lua numbers are doubles:
// microseconds since 1970 (~2^51) are exact, and are formatted with %.0f
// because tostring() would print 1.7e+15.
// fence_after(counter, last): the next fence after `last` (the counter's
// value, read by last_fence(), possibly earlier in the script), written back.
#define LOCKON_LUA_FENCE_AFTER                                                                      \
  "local function last_fence(counter) return tonumber(redis.call('GET', counter) or '0') or 0 end\n" \
  "local function fence_after(counter, last)\n"                                                     \
  "  local now = redis.call('TIME')\n"                                                              \
  "  local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])\n"                                 \
  "  if last >= fence then fence = last + 1 end\n"                                                  \
  "  redis.call('SET', counter, string.format('%.0f', fence), 'PX', 3600000)\n"                     \
  "  return fence\n"                                                                                \
  "end\n"
#define LOCKON_LUA_NEXT_FENCE_AT                                                                    \
  LOCKON_LUA_FENCE_AFTER                                                                            \
  "local function next_fence_at(counter) return fence_after(counter, last_fence(counter)) end\n"
#define LOCKON_LUA_NEXT_FENCE \
  LOCKON_LUA_NEXT_FENCE_AT "local function next_fence() return next_fence_at(KEYS[3]) end\n"

// Gives K to the first queued waiter whose process still listens, or
// deletes K when there is none. KEYS[1..7] = lock, queue, fence, hand-over
// record, holder record, queued holders' records, hand-over subscriber
// (lock_script_keys()). Defined in every script that hands over;
// hand_over(entry) starts from `entry` when the caller popped the head
// already (release), else pops it. The wake-up channel is
// the queue key with "q" replaced by "wake:<subscriber id>" (wake_channel()).
// The record "<waiter id> <fence>" is how a waiter that missed its message
// tells a hand-over to *it* from a key that merely holds the same token.
// PUBLISH runs under pcall: a user without channel rights gets an error
// there, after LPOP/SET were applied; a script error would leave them
// applied and report failure. An unpublishable wake-up counts as nobody
// listening (waiters then poll) and is reported through `publish_denied`.
// Holder records (protocol/holder_record.hpp): the waiter `wid`'s record (queued in
// qwho, else `fallback`) becomes the holder's, its `since` restamped with
// the server's clock, with the lease's expiry; no record: none is shown.
#define LOCKON_LUA_SET_HOLDER                                                                       \
  "local function set_holder(wid, ttl, fallback)\n"                                                 \
  "  local info = qw_get(wid) or fallback\n"                                                        \
  "  qw_del(wid)\n"                                                                                  \
  "  local head = info and string.match(info, '^(.*|)')\n"                                          \
  "  if not head then del(5) return end\n"                                                          \
  "  local t = redis.call('TIME')\n"                                                                \
  "  local v = head .. string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))\n" \
  "  if ttl == '0' then set(5, v) else set(5, v, 'PX', ttl) end\n"                                  \
  "end\n"

// KEYS[7] names the process (subscriber id) the last hand-over went to,
// for two leases, or the process of a holder that took K directly, named
// by a waiter of that same process as it queues (wait_attempt: the holder
// record says whose thread holds K); the holder's renewals keep it while
// it names their process (renew()). K found free with waiters queued
// means its lease lapsed:
// if that process was handed K and let it lapse, it is paused or gone, and
// each of its other queued waiters would be handed K for one more lease in
// turn (verify --seed 29: a 6 s gap). Its entries are dropped instead, all
// of them, whichever of its Clients (subscribers) queued them (same_process);
// its waiters queue again, at the tail, when it runs (wait_attempt). `my_sid`:
// the caller's own process, which is evidently running. A release deletes
// KEYS[7]: only a lapse finds it.
// Only the queueing script calls it: the others do not define it (each
// closure a script defines costs the server on every call).
#define LOCKON_LUA_DROP_LAPSED                                                                      \
  LOCKON_LUA_SAME_PROCESS                                                                           \
  "local function drop_lapsed(my_sid)\n"                                                             \
  "  local lapsed = get(7)\n"                                                                       \
  "  if not lapsed then return end\n"                                                               \
  "  del(7)\n"                                                                                      \
  "  if same_process(lapsed, my_sid) then return end\n"                                             \
  "  for _, e in ipairs(q_entries()) do\n"                                                          \
  "    local sid, wid = string.match(e, '^([^|]*)|([^|]*)|')\n"                                      \
  "    if same_process(sid, lapsed) then\n"                                                         \
  "      q_remove(e, true)\n"                                                                       \
  "      if wid then qw_del(wid) end\n"                                                             \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "end\n"

#define LOCKON_LUA_HAND_OVER                                                                        \
  LOCKON_LUA_NEXT_FENCE                                                                             \
  LOCKON_LUA_LOCK_STAGE                                                                             \
  "local wake_prefix = string.sub(KEYS[2], 1, -2) .. 'wake:'\n"                                    \
  "local publish_denied = 0\n"                                                                      \
  LOCKON_LUA_SET_HOLDER                                                                             \
  "local function hand_over(entry)\n"                                                               \
  "  while true do\n"                                                                               \
  "    if not entry then entry = q_pop() end\n"                                                     \
  "    if not entry then\n"                                                                         \
  "      del(1) del(5) del(4) del(7)\n"                                                             \
  "      return false\n"                                                                            \
  "    end\n"                                                                                       \
  "    local sid, wid, ttl, fenced, token = string.match(entry, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n" \
  "    entry = nil\n"                                                                               \
  "    if token then\n"                                                                             \
  "      set_holder(wid, ttl, nil)\n"                                                                 \
  "      if ttl == '0' then set(1, token)\n"                                                         \
  "      else set(1, token, 'PX', ttl) end\n"                                                        \
  "      local record = wid .. ' 0'\n"                                                              \
  "      if fenced == '1' then record = wid .. ' ' .. string.format('%.0f', next_fence()) end\n"    \
  "      set(4, record, 'PX', ttl == '0' and 86400000 or ttl)\n"                                     \
  "      if ttl ~= '0' then set(7, sid, 'PX', 2 * tonumber(ttl)) end\n"                              \
  "      local heard = redis.pcall('PUBLISH', wake_prefix .. sid, record)\n"                        \
  "      if type(heard) == 'number' then\n"                                                         \
  "        if heard > 0 then return true end\n"                                                     \
  "      else\n"                                                                                    \
  "        publish_denied = 1\n"                                                                    \
  "      end\n"                                                                                     \
  "    end\n"                                                                                       \
  "  end\n"                                                                                         \
  "end\n"

// The same script publishing with SPUBLISH (Redis Cluster: the receiver
// count then covers the subscribers of the channel's shard, which is what
// the hand-over's liveness check needs; PUBLISH would count only the
// subscribers connected to the node that ran the script). One per script,
// built on first use; `plain` must be a function-local static.
const Script& sharded_variant(const Script& plain, bool sharded) {
  if (!sharded) return plain;
  static std::mutex mutex;
  static std::map<const Script*, std::unique_ptr<Script>> variants;
  std::lock_guard lock(mutex);
  auto& variant = variants[&plain];
  if (!variant) {
    std::string body = plain.body();
    const std::string from = "redis.pcall('PUBLISH'";
    for (auto at = body.find(from); at != std::string::npos; at = body.find(from, at + 1))
      body.replace(at, from.size(), "redis.pcall('SPUBLISH'");
    variant = std::make_unique<Script>(std::move(body));
  }
  return *variant;
}

// Splits the caller's own entry (ARGV[1]) into its parts.
#define LOCKON_LUA_MY_ENTRY                                                                         \
  "local _, my_id, my_ttl, my_fenced, my_token = string.match(ARGV[1], '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.+)$')\n"

// Once the lease (KEYS[1]) was renewed or extended, for renew() and
// extend() (ARGV[1]: the holder's token): the holder record (KEYS[2],
// optional) expires with it if it names this token, and goes if it names
// another (an earlier holder's, left by a forced release or an expiry: a
// record names the current holder or is absent); the
// record of the hand-over to the holder's process (KEYS[3], optional; only
// while it names `sid`'s process: a waiter on another Client of this process
// may have named its own subscriber) one `ttl` after, as a hand-over writes it: a holder
// paused past its lease then has its process's other waiters dropped
// (drop_lapsed), however long it held.
#define LOCKON_LUA_KEEP_LEASE_RECORDS                                                               \
  LOCKON_LUA_SAME_PROCESS                                                                           \
  "local function keep_lease_records(ttl, sid)\n"                                                   \
  "  if #KEYS < 2 then return end\n"                                                                \
  "  local p = redis.call('PTTL', KEYS[1])\n"                                                       \
  "  if p <= 0 then return end\n"                                                                   \
  "  local record = redis.call('GET', KEYS[2])\n"                                                   \
  "  local ours = string.sub(ARGV[1], 1, 8) .. '|'\n"                                               \
  "  if record and string.sub(record, 1, #ours) == ours then redis.call('PEXPIRE', KEYS[2], p)\n"   \
  "  elseif record then redis.call('DEL', KEYS[2]) end\n"                                           \
  "  if #KEYS >= 3 and same_process(redis.call('GET', KEYS[3]), sid) then\n"                         \
  "    redis.call('PEXPIRE', KEYS[3], p + tonumber(ttl))\n"                                         \
  "  end\n"                                                                                         \
  "end\n"

}  // namespace

const Script& wait_attempt(bool sharded) {
  static const Script script(
      LOCKON_LUA_HAND_OVER LOCKON_LUA_DROP_LAPSED LOCKON_LUA_MY_ENTRY
      // GET first: a key of another type fails here with WRONGTYPE.
      "local holder = get(1)\n"
      "local function acquired(fence)\n"
      "  return finish({1, fence, publish_denied, 0})\n"
      "end\n"
      // K holds our token. Handed to us: the record names us. Otherwise it
      // is ours only if nobody else can know the token (ARGV[4] == '1': a
      // random token, and this is a retry of an attempt whose reply was
      // lost); with a caller-chosen token it is someone else's holding.
      "local function holding_our_token()\n"
      "  local record = get(4)\n"
      "  if record and string.sub(record, 1, #my_id + 1) == my_id .. ' ' then\n"
      // Handed to us before this attempt: restart the lease so that it is
      // counted from this attempt's send time.
      "    if my_ttl ~= '0' then pexpire(1, my_ttl) pexpire(5, my_ttl) end\n"
      "    return acquired(tonumber(string.sub(record, #my_id + 2)))\n"
      "  end\n"
      "  if ARGV[4] ~= '1' then return finish({-1, 0, publish_denied, 0}) end\n"
      "  if my_ttl ~= '0' then pexpire(1, my_ttl) end\n"
      "  if ARGV[5] then set_holder(my_id, my_ttl, ARGV[5]) end\n"
      "  return acquired(my_fenced == '1' and next_fence() or 0)\n"
      "end\n"
      "if holder == my_token then return holding_our_token() end\n"
      "if not holder then\n"
      "  local head = q_head()\n"
      "  if head and head ~= ARGV[1] then\n"
      // Free with others first in line (the holder expired without a
      // release): hand it down the line; it may reach us.
      "    drop_lapsed(string.match(ARGV[1], '^([^|]*)|'))\n"
      "    hand_over()\n"
      "    holder = get(1)\n"
      "    if holder == my_token then return holding_our_token() end\n"
      "  end\n"
      "  if not holder then\n"
      "    if head == ARGV[1] then q_pop() end\n"
      "    if my_ttl == '0' then set(1, my_token)\n"
      "    else set(1, my_token, 'PX', my_ttl) end\n"
      "    if ARGV[5] then set_holder(my_id, my_ttl, ARGV[5]) end\n"
      "    return acquired(my_fenced == '1' and next_fence() or 0)\n"
      "  end\n"
      "end\n"
      // `ahead`: entries before ours (the waiter's spin window, handoff_spin.hpp).
      "local ahead = false\n"
      "if ARGV[2] ~= '1' then ahead = q_pos(ARGV[1]) end\n"
      "if not ahead then\n"
      // New, or dropped while its process was unreachable: back in line.
      "  ahead = q_push(ARGV[1]) - 1\n"
      "end\n"
      "redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
      // This waiter's record for `lockon status` (ARGV[5], optional): kept
      // from its first queueing, so `since` says how long it has waited.
      "if ARGV[5] then\n"
      "  qw_setnx(my_id, ARGV[5])\n"
      "  redis.call('PEXPIRE', KEYS[6], ARGV[3])\n"
      "end\n"
      "local pttl = ttl_left(1)\n"
      // First queued behind a holder of our own process, which took K
      // without a hand-over: name our process in KEYS[7] as a hand-over
      // would, so that if it is paused past its lease our entries are
      // dropped (drop_lapsed), not handed K for one more lease each. Its
      // renewals keep the record. Ours if its random token ends in our
      // process's nonce (common/token.hpp), or if the holder records say so
      // (host|pid|process start; a custom token): the record must be the
      // holder's (its token's first 8 characters), since a failed fast path
      // leaves its own record for a moment (holder_record.hpp). Two random tokens
      // (both carry a nonce) are told apart by their nonces alone: the
      // records are read only when one token is custom (a GET and four
      // pattern matches on every contended queueing, ~0.2 µs saved per
      // call in isolation; docs/benchmarks.md, session 20).
      "if ARGV[2] == '1' and holder and pttl > 0 and my_ttl ~= '0' then\n"
      "  local both_random = ARGV[4] == '1' and string.find(string.sub(holder, -13), '^%.%x%x%x%x%x%x%x%x%x%x%x%x$') ~= nil\n"
      "  local ours = ARGV[4] == '1' and same_process(holder, my_token)\n"
      "  if not ours and not both_random and ARGV[5] then\n"
      "    local function process_of(record)\n"
      "      return record and string.match(record, '^[^|]*|([^|]*|[^|]*|[^|]*)|')\n"
      "    end\n"
      "    local held_by = get(5)\n"
      "    local mine = process_of(ARGV[5])\n"
      "    local short = string.sub(holder, 1, 8) .. '|'\n"
      "    ours = mine and held_by and string.sub(held_by, 1, #short) == short and process_of(held_by) == mine\n"
      "  end\n"
      "  if ours then\n"
      "    set(7, string.match(ARGV[1], '^([^|]*)|'), 'PX', pttl + tonumber(my_ttl))\n"
      "  end\n"
      "end\n"
      "return finish({0, pttl, publish_denied, ahead})\n");
  return sharded_variant(script, sharded);
}

const Script& fenced_acquire() {
  // The uncontended fenced acquisition: SET NX and the fence in one script,
  // the fence max(last + 1, the server's clock), not a bare INCR. An INCR
  // continues from whatever counter the server has, and a counter that came
  // back stale (a restart from an RDB snapshot, a failover to a replica that
  // lagged) handed out fences already given (found by review, session 17).
  // The counter is read before anything is written: a counter of the wrong
  // type (or one the user may not read) fails the script while K is still
  // untouched (scripts are not rolled back). KEYS: lock, fence counter.
  // ARGV: token, ttl in ms ('0': no expiry). {1, fence}: acquired.
  // {0, holder's token[, fence]}: held; the fence when the holder's token is
  // ours (a retried request whose first reply was lost: the caller decides
  // whether that is a win).
  static const Script script(
      LOCKON_LUA_FENCE_AFTER
      "local last = last_fence(KEYS[2])\n"
      "local function next_fence() return fence_after(KEYS[2], last) end\n"
      "local previous\n"
      "if ARGV[2] == '0' then previous = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET')\n"
      "else previous = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2], 'GET') end\n"
      "if previous then\n"
      "  if previous == ARGV[1] then return {0, previous, next_fence()} end\n"
      "  return {0, previous}\n"
      "end\n"
      "return {1, next_fence()}\n");
  return script;
}

const Script& release(bool sharded) {
  // Nobody queued (the uncontended cycle): the lock, the record of a
  // hand-over to us and the holder record go in one DEL, before the
  // hand-over's functions are even defined. Same effect as hand_over() on an
  // empty queue, at well under half the server's work (docs/benchmarks.md,
  // "uncontended hot path"). The queue's head is popped here rather than
  // looked at with EXISTS: the contended release then makes one server call
  // fewer, and the uncontended one pays an LINDEX on a missing key instead of
  // an EXISTS. A queue key of the wrong type fails that LINDEX with WRONGTYPE
  // before anything is written, as before. Looked at, not popped: the pop
  // is staged (lock_script_stage.hpp), as every removal of the hand-over.
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "local first = redis.call('LINDEX', KEYS[2], 0)\n"
      "if not first then\n"
      "  redis.call('DEL', KEYS[1], KEYS[4], KEYS[5], KEYS[7])\n"
      "  return 1\n"
      "end\n"
      LOCKON_LUA_HAND_OVER
      // The record of the hand-over to us (if any) has served its purpose:
      // hand_over() overwrites it, or deletes it with K.
      "q_popped = 1\n"
      "hand_over(first)\n"
      "return finish(1 + publish_denied)\n");
  return sharded_variant(script, sharded);
}

const Script& extend() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "local pttl = redis.call('PTTL', KEYS[1])\n"
      "if pttl < 0 then return -1 end\n"
      "local ttl = tonumber(ARGV[2])\n"
      "if ARGV[3] == '0' then ttl = ttl + pttl end\n"
      "redis.call('PEXPIRE', KEYS[1], ttl)\n"
      LOCKON_LUA_KEEP_LEASE_RECORDS
      "keep_lease_records(ARGV[4], ARGV[5])\n"
      "return 1\n");
  return script;
}

const Script& delete_record() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0");
  return script;
}

const Script& replace_record() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      "local p = redis.call('PTTL', KEYS[1])\n"
      "if p > 0 then redis.call('SET', KEYS[2], ARGV[2], 'PX', p)\n"
      "elseif p == -1 then redis.call('SET', KEYS[2], ARGV[2]) else return 0 end\n"
      "return 1\n");
  return script;
}

const Script& renew() {
  static const Script script(
      "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
      // GT: the watchdog never shortens a lease the owner extended by hand.
      "if ARGV[3] == '1' then redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')\n"
      "else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end\n"
      LOCKON_LUA_KEEP_LEASE_RECORDS
      "keep_lease_records(ARGV[2], ARGV[4])\n"
      "return 1\n");
  return script;
}

const Script& cancel_wait(bool sharded) {
  static const Script script(
      LOCKON_LUA_HAND_OVER LOCKON_LUA_MY_ENTRY
      "q_remove(ARGV[1])\n"
      "qw_del(my_id)\n"
      // Handed K just as we gave up: pass it on rather than sit on it.
      "if get(1) == my_token then\n"
      "  hand_over()\n"
      "  return finish(1 + 2 * publish_denied)\n"
      "end\n"
      "return finish(0)\n");
  return sharded_variant(script, sharded);
}

const Script& move_wait() {
  static const Script script(
      "local at = redis.call('LPOS', KEYS[2], ARGV[1])\n"
      "if not at then return 0 end\n"
      "redis.call('LSET', KEYS[2], at, ARGV[2])\n"
      "return 1\n");
  return script;
}

const Script& acquire_all() {
  static const Script script(
      LOCKON_LUA_NEXT_FENCE_AT
      // Check everything before writing anything: GET also fails a key of
      // another type with WRONGTYPE here, before any write.
      "local n = #KEYS / 4\n"
      "for i = 0, n - 1 do\n"
      "  if redis.call('GET', KEYS[4 * i + 1]) then return {0, i + 1, 1} end\n"
      // Free but with waiters queued (a holder expired without a release):
      // their turn first; the caller falls back to the Lock's own path,
      // which hands the key down the line and queues behind it.
      "  if redis.call('LLEN', KEYS[4 * i + 2]) > 0 then return {0, i + 1, 2} end\n"
      "  redis.call('GET', KEYS[4 * i + 3])\n"
      "end\n"
      "local out = {1}\n"
      "for i = 0, n - 1 do\n"
      "  if ARGV[2] == '0' then redis.call('SET', KEYS[4 * i + 1], ARGV[1])\n"
      "  else redis.call('SET', KEYS[4 * i + 1], ARGV[1], 'PX', ARGV[2]) end\n"
      "  out[i + 2] = ARGV[3] == '1' and next_fence_at(KEYS[4 * i + 3]) or 0\n"
      "  if ARGV[4] ~= '' then\n"
      "    if ARGV[2] == '0' then redis.call('SET', KEYS[4 * i + 4], ARGV[4])\n"
      "    else redis.call('SET', KEYS[4 * i + 4], ARGV[4], 'PX', ARGV[2]) end\n"
      "  end\n"
      "end\n"
      "return out\n");
  return script;
}

#undef LOCKON_LUA_NEXT_FENCE_AT
#undef LOCKON_LUA_FENCE_AFTER
#undef LOCKON_LUA_MY_ENTRY
#undef LOCKON_LUA_HAND_OVER
#undef LOCKON_LUA_DROP_LAPSED
#undef LOCKON_LUA_NEXT_FENCE
#undef LOCKON_LUA_SET_HOLDER
#undef LOCKON_LUA_KEEP_LEASE_RECORDS

}  // namespace scripts
}  // namespace lockon::detail

namespace lockon {

std::string lock_companion_key(std::string_view key, std::string_view suffix) {
  return detail::companion_key(key, suffix);
}

}  // namespace lockon
