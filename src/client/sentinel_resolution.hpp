// Finding a Sentinel deployment's master, written once for both fronts:
// resolve_master is a coroutine template over a port — the blocking
// SentinelTopology (InlineTask, common/inline_task.hpp) and the Asio
// AsyncClientImpl (asio::awaitable) — which supplies the two round trips:
//
//   Task<ReplyPtr> ask_sentinel(const ConnectionOptions& sentinel, time_point until)
//       SENTINEL GET-MASTER-ADDR-BY-NAME's reply (null: none by `until`);
//   Task<std::optional<Master>> master_if_role(const ConnectionOptions& master, time_point until)
//       the master, connected, if it answers ROLE "master" by `until`
//       (nullopt: another role or no answer); Master is what the port keeps
//       (the blocking front: the options; the Asio one: the connection).
//   Both throw Error for a failure (connect, auth, TLS...).
//
// The order: a master named by failover news first (no sentinel's answer
// can be newer; its failure decides nothing), then each sentinel from the
// one that answered last; a named master must answer ROLE "master" (a
// sentinel may still name a demoted one). Bounded by resolution_bounds.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/error_map.hpp"
#include "client/hiredis_handles.hpp"
#include "lockon/errors.hpp"
#include "lockon/options.hpp"

namespace lockon::detail {

/// Options for one sentinel: its address, the sentinel credentials, db 0.
ConnectionOptions sentinel_options(const ConnectionOptions& base, const NodeAddress& address);
/// Options for the master at `host:port`: the URL's credentials and db.
ConnectionOptions master_options(const ConnectionOptions& base, std::string host, int port);
/// Options for probing the replica a failover is promoting (its ROLE):
/// the master's, with each step bounded by 250 ms at most — a slow
/// candidate delays only one sentinel's news, which the others repeat.
ConnectionOptions candidate_probe_options(const ConnectionOptions& base, const NodeAddress& candidate);
/// The sentinels of a Sentinel URL, in its order.
std::vector<NodeAddress> sentinels_of(const ConnectionOptions& options);

/// What one sentinel's reply to SENTINEL GET-MASTER-ADDR-BY-NAME says (both
/// fronts read it alike): the master's address, or `unknown` (nil: this
/// sentinel does not know the name), or `problem` (why the reply is unusable,
/// for the error listing every sentinel tried).
struct MasterAddressAnswer {
  std::optional<NodeAddress> address;
  bool unknown = false;
  std::string problem;
};
MasterAddressAnswer read_master_address(const redisReply& reply);

/// Whether a ROLE reply says "master".
bool role_is_master(const redisReply* reply);

/// The bounds of one resolution, for both fronts: each step (a connect and
/// a reply) `step` — the connect and socket timeouts, 5 s for each one that
/// is 0 ("no bound": a dead sentinel must not stop the next one from being
/// asked) — and the whole `budget`: two steps (a sentinel's answer and the
/// master's ROLE) plus 100 ms, after which no further sentinel is asked.
struct ResolutionBounds {
  std::chrono::milliseconds step;
  std::chrono::milliseconds budget;
};
ResolutionBounds resolution_bounds(const ConnectionOptions& options) noexcept;
/// `options` with its connect and socket timeouts as a resolution step
/// bounds them (the blocking port's connections, which take no deadline).
ConnectionOptions step_bounded(ConnectionOptions options) noexcept;

/// A resolution's result: the master, and the index of the sentinel that
/// named it (nullopt: failover news did).
template <class Master>
struct ResolvedMaster {
  Master master;
  std::optional<std::size_t> sentinel;
};

/// Resolves the master of `options` (a Sentinel URL), asking the sentinels
/// from index `first`, after `hint` (failover news) if any. Throws
/// ConnectError when no sentinel knows the name or none names a master,
/// AuthError when every failure was one.
template <class Port>
auto resolve_master(Port& port, const ConnectionOptions& options, std::size_t first, std::optional<NodeAddress> hint)
    -> typename Port::template Task<ResolvedMaster<typename Port::Master>> {
  using Clock = std::chrono::steady_clock;
  using Resolved = ResolvedMaster<typename Port::Master>;
  const std::vector<NodeAddress> sentinels = sentinels_of(options);
  const ResolutionBounds bounds = resolution_bounds(options);
  const auto give_up_at = Clock::now() + bounds.budget;
  std::string tried;
  NodeFailures failed;
  bool unknown_everywhere = true;
  if (hint) {
    const ConnectionOptions master = master_options(options, hint->host, hint->port);
    std::string problem = ", which is not a master (ROLE)";
    try {
      std::optional<typename Port::Master> found = co_await port.master_if_role(master, Clock::now() + bounds.step);
      if (found) co_return Resolved{std::move(*found), std::nullopt};
    } catch (const Error& e) {
      problem = std::string(": ") + e.what();
    }
    tried += "; failover news named " + master.endpoint() + problem;
  }
  for (std::size_t i = 0; i < sentinels.size(); ++i) {
    if (i > 0 && Clock::now() >= give_up_at) {
      tried += "; resolution budget of " + std::to_string(bounds.budget.count()) + " ms spent";
      failed.add_unclassified();  // the sentinels left untried might have answered
      break;
    }
    const std::size_t index = (first + i) % sentinels.size();
    const ConnectionOptions sentinel = sentinel_options(options, sentinels[index]);
    const std::string where = sentinel.endpoint();
    try {
      const ReplyPtr reply = co_await port.ask_sentinel(sentinel, Clock::now() + bounds.step);
      if (!reply) {
        unknown_everywhere = false;
        tried += "; " + where + ": no answer within " + std::to_string(bounds.step.count()) + " ms";
        failed.add_unclassified();
        continue;
      }
      const MasterAddressAnswer named = read_master_address(*reply);
      if (!named.unknown) unknown_everywhere = false;
      if (!named.address) {
        tried += "; " + where + ": " + (named.unknown ? std::string("unknown master") : named.problem);
        failed.add_unclassified();
        continue;
      }
      const ConnectionOptions master = master_options(options, named.address->host, named.address->port);
      std::optional<typename Port::Master> found = co_await port.master_if_role(master, Clock::now() + bounds.step);
      if (!found) {
        tried += "; " + where + " named " + master.endpoint() + ", which is not a master (ROLE)";
        failed.add_unclassified();
        continue;
      }
      co_return Resolved{std::move(*found), index};
    } catch (const Error& e) {  // the sentinel's or the master's
      unknown_everywhere = false;
      tried += "; " + where + ": " + e.what();
      failed.add(e);
    }
  }
  if (unknown_everywhere)
    throw ConnectError("Sentinel: no sentinel of " + options.endpoint() + " knows master '" + options.master_name +
                       "' (SENTINEL GET-MASTER-ADDR-BY-NAME answered nil)");
  // A wrong password (sentinels' or master's) everywhere is an AuthError here too.
  failed.throw_summary("Sentinel: cannot find master '" + options.master_name + "'" + tried);
}

}  // namespace lockon::detail
