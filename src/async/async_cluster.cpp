#include "async/async_cluster.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <charconv>

#include "client/asking.hpp"
#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "client/routed.hpp"
#include "common/token.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

std::string address_text(const NodeAddress& address) { return address.host + ":" + std::to_string(address.port); }

asio::awaitable<void> close_when_idle(std::shared_ptr<AsyncConnection> old, std::chrono::milliseconds bound) {
  asio::steady_timer timer(old->executor());
  const auto until = std::chrono::steady_clock::now() + bound;
  while (old->owed() > 0 && std::chrono::steady_clock::now() < until) {
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  old->close();
}

asio::awaitable<void> sleep_for(const asio::any_io_executor& executor, std::chrono::milliseconds delay) {
  asio::steady_timer timer(executor, delay);
  co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
}

std::chrono::milliseconds socket_bound(const ConnectionOptions& options) {
  return options.socket_timeout.count() > 0 ? options.socket_timeout : std::chrono::milliseconds(5000);
}

}  // namespace

void retire_when_idle(std::shared_ptr<AsyncConnection> old, std::chrono::milliseconds bound) noexcept {
  try {
    auto executor = old->executor();
    asio::co_spawn(executor, close_when_idle(std::move(old), bound), asio::detached);
  } catch (...) {
  }
}

AsyncCluster::AsyncCluster(asio::any_io_executor executor, const ConnectionOptions& options,
                           std::chrono::milliseconds reconnect_delay)
    : executor_(std::move(executor)),
      options_(options),
      reconnect_delay_(reconnect_delay),
      subscriber_id_(new_subscriber_id()),
      slots_(kClusterSlots) {
  if (options_.seeds.empty()) options_.seeds.push_back({options_.host, options_.port});
}

void AsyncCluster::close() noexcept {
  closed_ = true;
  for (auto& [name, node] : nodes_) {
    node->connection->close();
    if (node->subscriber) node->subscriber->close();
  }
  nodes_.clear();
  std::fill(slots_.begin(), slots_.end(), nullptr);
  stale_ = true;
}

std::shared_ptr<AsyncCluster::Node> AsyncCluster::node_at(const NodeAddress& given) {
  const NodeAddress address = given.host.empty() ? NodeAddress{options_.seeds.front().host, given.port} : given;
  auto& node = nodes_[address_text(address)];
  if (!node) {
    node = std::make_shared<Node>();
    node->options = node_options(options_, address);
    node->connection = std::make_shared<AsyncConnection>(executor_, node->options);
  }
  return node;
}

asio::awaitable<std::shared_ptr<AsyncCluster::Node>> AsyncCluster::node_for_slot(int slot, Clock::time_point until) {
  auto self = shared_from_this();
  closed_ = false;  // a request after close() reconnects, as the standalone client does
  const auto index = static_cast<std::size_t>(slot);
  if (stale_ && Clock::now() - last_refresh_ >= kRefreshInterval && !refreshing_) {
    try {
      co_await refresh(until);
    } catch (...) {
      if (!slots_[index]) throw;  // else route with the map we have: a wrong guess costs a MOVED
    }
  }
  if (slots_[index]) co_return slots_[index];
  // An unserved slot in a map read moments ago (a master failed, its replica
  // not promoted yet): say so without asking again right away.
  if (nodes_.empty() || Clock::now() - last_refresh_ >= kRefreshInterval) co_await refresh(until);
  if (slots_[index]) co_return slots_[index];
  throw ServerBusyError("route key on " + options_.endpoint() + ": no master serves hash slot " +
                            std::to_string(slot) + " (cluster down?)",
                        "CLUSTERDOWN");
}

asio::awaitable<void> AsyncCluster::refresh(Clock::time_point until) {
  auto self = shared_from_this();
  if (refreshing_) {
    // Another coroutine reads the map (a round trip): look again every few ms.
    asio::steady_timer timer(executor_);
    for (int i = 0; i < 5000 && refreshing_ && Clock::now() < until; ++i) {
      timer.expires_after(std::chrono::milliseconds(5));
      co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    }
    co_return;
  }
  refreshing_ = true;
  // Cleared however this ends: a cancelled caller's next co_await throws
  // operation_aborted (not a lockon Error), and a flag left set stopped
  // every later refresh of this client (found by review, session 17).
  struct ClearWhenDone {
    bool& flag;
    ~ClearWhenDone() { flag = false; }
  } clear_when_done{refreshing_};
  last_refresh_ = Clock::now();
  ++refreshes_;
  std::vector<NodeAddress> candidates;
  for (const auto& [name, node] : nodes_) candidates.push_back({node->options.host, node->options.port});
  for (const NodeAddress& seed : options_.seeds)
    if (std::find(candidates.begin(), candidates.end(), seed) == candidates.end()) candidates.push_back(seed);
  std::string failures;
  NodeFailures failed;
  for (const NodeAddress& candidate : candidates) {
    std::vector<SlotOwner> owners;
    try {
      owners = co_await read_map(candidate, until);
    } catch (const Error& e) {
      failures += std::string(" ") + e.what() + ";";
      failed.add(e);
      continue;
    }
    if (owners.empty()) {
      failures += " " + address_text(candidate) + ": no slots assigned;";
      failed.add_unclassified();
      continue;
    }
    std::map<std::string, std::shared_ptr<Node>> kept;
    std::vector<std::shared_ptr<Node>> slots(kClusterSlots);
    for (const SlotOwner& owner : owners) {
      auto node = node_at(owner.master);
      kept[address_text(owner.master)] = node;
      for (int slot = std::max(owner.start, 0); slot <= owner.end && slot < kClusterSlots; ++slot)
        slots[static_cast<std::size_t>(slot)] = node;
    }
    // Masters no longer listed: their connection closes once idle; waiters
    // on their subscriber poll (and follow their slot on the next attempt).
    for (auto& [name, node] : nodes_) {
      if (kept.count(name) != 0) continue;
      retire_when_idle(node->connection, socket_bound(options_));
      if (node->subscriber) node->subscriber->close();
    }
    nodes_.swap(kept);
    slots_.swap(slots);
    stale_ = false;
    co_return;
  }
  // A wrong password on every node is an AuthError here too (not "unavailable").
  failed.throw_summary("cluster map on " + options_.endpoint() + ": no node answered CLUSTER SHARDS/SLOTS:" + failures);
}

asio::awaitable<std::vector<SlotOwner>> AsyncCluster::read_map(const NodeAddress& from, Clock::time_point until) {
  // Its own short-lived connection: a master's command connection may be
  // stuck behind a deep pipeline.
  auto connection = std::make_shared<AsyncConnection>(executor_, node_options(options_, from));
  const auto bound = std::min(until, Clock::now() + options_.connect_timeout + socket_bound(options_));
  std::vector<SlotOwner> owners;
  std::exception_ptr failure;
  try {
    std::string resp;
    const std::array<std::string_view, 2> shards{"CLUSTER", "SHARDS"};
    append_resp(resp, shards);
    auto outcome = co_await connection->exchange(std::move(resp), 1, bound, "CLUSTER SHARDS");
    if (outcome.ended != AsyncConnection::Ended::replied)
      throw TimeoutError("CLUSTER SHARDS on " + connection->endpoint() + ": no reply before the deadline");
    if (outcome.replies[0]->type == REDIS_REPLY_ARRAY) {
      owners = parse_cluster_shards(*outcome.replies[0], from, options_.tls.enabled);
    } else {
      // Before Redis 7: CLUSTER SLOTS.
      std::string legacy_resp;
      const std::array<std::string_view, 2> legacy{"CLUSTER", "SLOTS"};
      append_resp(legacy_resp, legacy);
      outcome = co_await connection->exchange(std::move(legacy_resp), 1, bound, "CLUSTER SLOTS");
      if (outcome.ended != AsyncConnection::Ended::replied)
        throw TimeoutError("CLUSTER SLOTS on " + connection->endpoint() + ": no reply before the deadline");
      if (outcome.replies[0]->type == REDIS_REPLY_ERROR)
        throw_reply_error(*outcome.replies[0], connection->endpoint(), "CLUSTER SLOTS");
      owners = parse_cluster_slots(*outcome.replies[0], from);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  connection->close();
  if (failure) std::rethrow_exception(failure);
  co_return owners;
}

void AsyncCluster::on_moved(const Node& node, std::string_view text) noexcept {
  // "MOVED <slot> <host>:<port>": fix that slot now, re-read the rest soon.
  stale_ = true;
  try {
    const auto first = text.find(' ');
    const auto second = text.find(' ', first + 1);
    if (first == std::string_view::npos || second == std::string_view::npos) return;
    int slot = -1;
    std::from_chars(text.data() + first + 1, text.data() + second, slot);
    const Redirect where = redirect_of(text);
    if (slot < 0 || slot >= kClusterSlots || where.kind != RedirectKind::moved) return;
    NodeAddress target = where.target;
    if (target.host.empty()) target.host = node.options.host;
    slots_[static_cast<std::size_t>(slot)] = node_at(target);
  } catch (...) {
  }
}

asio::awaitable<AsyncCluster::Routed> AsyncCluster::exchange(std::string_view key, const std::string& resp,
                                                             std::size_t replies, Clock::time_point until,
                                                             std::string_view operation,
                                                             std::span<const std::span<const std::string_view>> commands) {
  auto self = shared_from_this();
  const int slot = key.empty() ? 0 : key_slot(key);
  const auto bound = until != Clock::time_point::max()
                         ? until
                         : Clock::now() + std::max<Clock::duration>(options_.socket_timeout, std::chrono::seconds(1));
  auto backoff = std::chrono::milliseconds(1);
  bool asking = false;
  NodeAddress ask_target;
  Routed routed;
  // MOVED/ASK count against kMaxRoutedAttempts (a redirection loop);
  // waits for a migration or failover (TRYAGAIN, CLUSTERDOWN, no owner,
  // connection refused) only against the time bound (and kMaxRoutedWaits): a
  // slot's migration outlasts 16 short back-offs.
  int redirects = 0;
  for (int attempt = 1;; ++attempt) {
    const bool may_retry = attempt < kMaxRoutedWaits && Clock::now() + backoff < bound;
    std::shared_ptr<Node> node;
    bool pause = false;  // (no co_await inside a handler)
    try {
      // (GCC 12 miscompiles co_await in a conditional expression: an if.)
      if (asking) node = node_at(ask_target);
      else node = co_await node_for_slot(slot, bound);
    } catch (const ServerBusyError&) {
      // No master serves the slot right now (a failover under way).
      if (!may_retry) throw;
      pause = true;
    }
    if (pause) {
      co_await sleep_for(executor_, backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
      continue;
    }
    std::string request;
    std::vector<bool> asked;  // per reply: an ASKING's (dropped below)
    if (asking) {
      const std::array<std::string_view, 1> asking_command{"ASKING"};
      if (commands.empty()) {
        append_resp(request, asking_command);
        request += resp;
        asked = {true};
        asked.resize(replies + 1, false);
      } else {
        AskingPrefixer prefixer;
        for (const auto& command : commands) {
          if (prefixer.needs_asking(command)) {
            append_resp(request, asking_command);
            asked.push_back(true);
          }
          append_resp(request, command);
          asked.push_back(false);
        }
      }
    } else {
      request = resp;
    }
    routed.connection = node->connection;
    try {
      routed.outcome = co_await node->connection->exchange(std::move(request), asking ? asked.size() : replies, until,
                                                           operation);
    } catch (const ConnectError&) {
      // Nothing was sent: re-read the map and retry.
      stale_ = true;
      asking = false;
      if (!may_retry) throw;
      pause = true;
    } catch (const IoError&) {
      stale_ = true;
      throw;
    }
    if (pause) {
      co_await sleep_for(executor_, backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
      continue;
    }
    if (routed.outcome.ended != AsyncConnection::Ended::replied) co_return routed;
    if (asking) {
      // Drop the ASKINGs' replies (+OK; an error there shows in the next one).
      std::vector<ReplyPtr> kept;
      kept.reserve(replies);
      for (std::size_t i = 0; i < routed.outcome.replies.size() && i < asked.size(); ++i)
        if (!asked[i]) kept.push_back(std::move(routed.outcome.replies[i]));
      routed.outcome.replies = std::move(kept);
    }
    const redisReply* redirect = first_redirect(routed.outcome.replies);
    if (redirect == nullptr) co_return routed;
    // Some commands ran, others were refused (a slot being migrated): never
    // resent, the caller reads a refused command as not done (routed.hpp).
    if (!commands.empty() && partly_refused(commands, routed.outcome.replies)) co_return routed;
    const std::string_view text(redirect->str, redirect->len);
    const Redirect what = redirect_of(text);
    if (what.kind == RedirectKind::moved) on_moved(*node, text);
    else stale_ = stale_ || text.starts_with("CLUSTERDOWN");
    if (what.kind != RedirectKind::retry) ++redirects;
    if (redirects >= kMaxRoutedAttempts || attempt >= kMaxRoutedWaits || Clock::now() >= bound) co_return routed;
    // A TRYAGAIN from the ASK target is retried there (with ASKING again):
    // going back to the source would only be sent to the target again, and
    // count an ASK per back-off.
    const bool ask_again = asking && what.kind == RedirectKind::retry;
    asking = what.kind == RedirectKind::ask || ask_again;
    if (what.kind == RedirectKind::ask) {
      ask_target = what.target;
      if (ask_target.host.empty()) ask_target.host = node->options.host;
    } else if (what.kind == RedirectKind::retry || redirects > 2) {
      // A MOVED right after a MOVED: the map is in flux (failover); wait.
      if (Clock::now() + backoff >= bound) co_return routed;
      co_await sleep_for(executor_, backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
    }
  }
}

asio::awaitable<std::shared_ptr<AsyncSubscriber>> AsyncCluster::subscriber_for(std::string_view key,
                                                                               Clock::time_point until) {
  auto self = shared_from_this();
  const std::string copy(key);  // a coroutine parameter view must not dangle across suspension
  auto node = co_await node_for_slot(key_slot(copy), until);
  if (!node->subscriber)
    node->subscriber = std::make_shared<AsyncSubscriber>(executor_, node->options, reconnect_delay_, true, subscriber_id_);
  co_return node->subscriber;
}

}  // namespace lockon::detail
