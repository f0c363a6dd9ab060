// Unguessable identifiers from OpenSSL's CSPRNG.
#pragma once

#include <cstddef>
#include <string>

namespace lockon::detail {

/// `bytes` random bytes from RAND_bytes, as lowercase hex (default: 128 bits).
/// Throws lockon::Error if the CSPRNG fails (never falls back to a weak one).
std::string random_hex(std::size_t bytes = 16);

/// The same, written over `out` (its capacity reused: a lock's token is
/// redrawn at every acquisition without an allocation).
void assign_random_hex(std::string& out, std::size_t bytes = 16);

/// A lock's random token: 128 random bits as hex, then '.' and this
/// process's nonce (48 random bits as hex, drawn once per process image,
/// again in a forked child): "<32 hex>.<12 hex>". The nonce tells a queued
/// waiter that the key's holder is a thread of its own process without any
/// other record (scripts::wait_attempt), so that a paused process costs its
/// waiters one lease, not one each. Written over `out` (no allocation once
/// its capacity suffices).
void assign_lock_token(std::string& out);
std::string lock_token();

/// A subscriber's id (the wake-up channel's suffix, the first field of a
/// queue entry): 64 random bits in hex, '.', this process's nonce, so that
/// the lock scripts can tell two subscribers of one process (two Clients,
/// or a Client and an AsyncClient) from two processes (scripts::renew(),
/// drop_lapsed in lock_scripts.cpp).
std::string new_subscriber_id();

/// `subscriber_id`, or, when it is empty (no subscriber on that server: the
/// Client's locks never waited there), this process's nonce alone,
/// "-.<12 hex>". Renewals and extensions pass it so that the scripts keep a
/// record naming any subscriber of their process (same_process in
/// lock_scripts.cpp), also when the holder's own Client has none.
std::string subscriber_or_process_id(std::string subscriber_id);

}  // namespace lockon::detail

/// Lua, for the lock scripts: `same_process(a, b)`, whether two ids belong to
/// one process: equal, or both ending in the same process nonce (the format
/// above: subscriber ids, random lock tokens, "-.<nonce>"; a share's member
/// "<kind>:<token>" too). An id without a nonce (an older lockon, a custom
/// token) matches only itself: a nonce is exactly 12 hex digits. Nil matches
/// nothing. A false match costs liveness only (entries re-queued), never safety.
/// Compares the last 13 characters first and checks their form only when
/// they are equal: the queueing lookup calls it on up to 1,024 holders, and
/// two pattern matches per call cost the server ~1 ms there (0.3 ms now).
#define LOCKON_LUA_SAME_PROCESS                                                \
  "local function same_process(a, b)\n"                                        \
  "  if not a or not b then return false end\n"                                \
  "  if a == b then return true end\n"                                         \
  "  local tail = string.sub(a, -13)\n"                                        \
  "  return tail == string.sub(b, -13) and\n"                                  \
  "         string.find(tail, '^%.%x%x%x%x%x%x%x%x%x%x%x%x$') ~= nil\n"       \
  "end\n"
