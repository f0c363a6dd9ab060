// What the sentinels say about a failover, read alike by both fronts'
// listeners (client/sentinel_topology.cpp, async/async_client.cpp).
//
// Why every sentinel, and why more than +switch-master: the sentinel that
// leads a failover publishes +switch-master only when the whole failover
// ends (every replica reconfigured: 6 s with Redis defaults, or at
// failover-timeout), although it names the new master to
// GET-MASTER-ADDR-BY-NAME as soon as it has seen the replica report itself
// master, and the old master keeps granting writes for seconds after that.
// A client that heard only that sentinel kept locking on the old master for
// 4–6.4 s while clients following another sentinel (told at once through
// the leader's hello message) had switched: two masters granting the same
// lock. So each client listens on every sentinel of its URL and acts on the
// first of these messages about its master, whichever sentinel sends it:
//   +failover-state-wait-promotion  the leader has just sent REPLICAOF NO ONE
//                                   to the replica it chose (names it): the
//                                   client probes that replica's ROLE every
//                                   kCandidateProbeEvery and switches once it
//                                   says master, not waiting up to a second
//                                   for the leader's next INFO poll of it;
//   +promoted-slave                 the leader saw the chosen replica report
//                                   itself master (names it): the earliest
//                                   word of the new master;
//   +failover-state-reconf-slaves   the same moment, naming the old master:
//                                   ask the sentinel that sent it;
//   +switch-master                  a sentinel's configuration changed
//                                   (names the new master).
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string_view>

#include "client/hiredis_handles.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// The channels a client subscribes to on each sentinel.
inline constexpr std::array<std::string_view, 4> kSentinelEventChannels{
    "+switch-master", "+promoted-slave", "+failover-state-reconf-slaves", "+failover-state-wait-promotion"};

/// `SUBSCRIBE` followed by kSentinelEventChannels: the one command a
/// listener sends on its sentinel connection.
inline constexpr std::array<std::string_view, 5> kSentinelSubscribe{
    "SUBSCRIBE", kSentinelEventChannels[0], kSentinelEventChannels[1], kSentinelEventChannels[2],
    kSentinelEventChannels[3]};

/// How often a listener asks the replica being promoted for its ROLE, and
/// for how long at most (the replica turns master as soon as it reads
/// REPLICAOF NO ONE; past the bound the sentinels' own news still comes).
inline constexpr auto kCandidateProbeEvery = std::chrono::milliseconds(20);
inline constexpr auto kCandidateWatchFor = std::chrono::milliseconds(3000);

/// News of a failover of one master. Either a replica is being promoted
/// (`candidate`: watch its ROLE, and once it says master it is
/// `new_master`), or the master changed: switch to `new_master` if it
/// answers ROLE with "master", else ask the sentinel that sent the news.
struct SentinelNews {
  /// The new master's address, when the message names it.
  std::optional<NodeAddress> new_master;
  /// The replica being promoted, not yet master.
  std::optional<NodeAddress> candidate;
};

/// What the pushed reply `message` (["message", channel, payload]) says
/// about master `name`; nullopt if it is not news of a failover of `name`
/// (another master, another channel, a subscription confirmation, a
/// malformed payload).
std::optional<SentinelNews> read_sentinel_news(const redisReply& message, std::string_view name);

/// Whether `news` names the master at `current` (every sentinel repeats the
/// news: once a client is on that master, nothing is left to do).
inline bool news_names(const SentinelNews& news, const ConnectionOptions& current) noexcept {
  return news.new_master && news.new_master->host == current.host && news.new_master->port == current.port;
}

}  // namespace lockon::detail
