// Tells the operator, once per server and process, when the server may
// evict keys: a lock key carries a TTL, so any maxmemory-policy but
// noeviction (volatile-ttl first of all) can drop a held lock when the
// server is full, and mutual exclusion with it (README, "Guarantees").
#pragma once

#include <string>
#include <string_view>

struct redisReply;

namespace lockon::detail {

class ClientImpl;

/// CONFIG GET's arguments for the check.
inline constexpr std::string_view kEvictionConfigGet[] = {"CONFIG", "GET", "maxmemory", "maxmemory-policy"};

/// The warning for a server at `endpoint` with these settings (the values
/// of CONFIG GET maxmemory / maxmemory-policy), or empty when it cannot
/// evict: maxmemory 0 (no limit) or policy noeviction.
std::string eviction_warning(std::string_view endpoint, std::string_view maxmemory, std::string_view policy);

/// The same, from the reply to CONFIG GET maxmemory maxmemory-policy (empty
/// for anything but that array: NOPERM, a renamed CONFIG...).
std::string eviction_warning(std::string_view endpoint, const redisReply& config_get_reply);

/// Asks the server serving `key` for its maxmemory settings (one round
/// trip on a pooled connection) and warns once (topic "eviction:<endpoint>")
/// if it may evict. Best effort, never throws: a user without +config, a
/// renamed CONFIG or an unreachable server means no check. Blocks for one
/// round trip: called from the renewal thread, never from a caller's.
void check_eviction_policy(ClientImpl& client, const std::string& key) noexcept;

}  // namespace lockon::detail
