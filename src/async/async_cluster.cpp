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

asio::awaitable<void> close_when_idle(std::shared_ptr<AsyncConnection> old, std::chrono::milliseconds bound) {
  asio::steady_timer timer(old->executor());
  const auto until = std::chrono::steady_clock::now() + bound;
  while (old->owed() > 0 && std::chrono::steady_clock::now() < until) {
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
  old->close();
}

asio::awaitable<void> sleep_for(const asio::any_io_executor& executor, std::chrono::steady_clock::duration delay) {
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
  if (stale_ && refresh_due()) start_refresh();
  // Routed with the map we have: a wrong guess costs a MOVED.
  if (slots_[index]) co_return slots_[index];
  // No owner: wait for a map read. An unserved slot in a map read moments
  // ago (a master failed, its replica not promoted yet): said so without
  // asking again right away.
  if (nodes_.empty() || refresh_due()) start_refresh();
  if (refreshing_) {
    asio::steady_timer timer(executor_);
    while (refreshing_) {
      if (Clock::now() >= until) co_return nullptr;  // the read goes on for the others; nothing was sent
      timer.expires_at(std::min(until, Clock::now() + std::chrono::milliseconds(2)));
      co_await timer.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
    }
    if (!slots_[index] && refresh_failure_) std::rethrow_exception(refresh_failure_);  // what every node failed with
  }
  if (slots_[index]) co_return slots_[index];
  throw ServerBusyError("route key on " + options_.endpoint() + ": no master serves hash slot " +
                            std::to_string(slot) + " (cluster down?)",
                        "CLUSTERDOWN");
}

bool AsyncCluster::refresh_due() const noexcept { return Clock::now() - last_refresh_ >= kRefreshInterval; }

void AsyncCluster::start_refresh() noexcept {
  if (refreshing_) return;
  try {
    refreshing_ = true;
    last_refresh_ = Clock::now();
    asio::co_spawn(executor_, refresh(shared_from_this()), asio::detached);
  } catch (...) {
    refreshing_ = false;  // not started: the next caller tries again
  }
}

asio::awaitable<void> AsyncCluster::refresh(std::shared_ptr<AsyncCluster> self) {
  // Cleared however this ends (an io_context torn down mid-read destroys
  // the frame): a flag left set would stop every later read of this client.
  struct ClearWhenDone {
    AsyncCluster& cluster;
    ~ClearWhenDone() {
      cluster.refreshing_ = false;
      cluster.last_refresh_ = Clock::now();
    }
  } clear_when_done{*self};
  ++refreshes_;
  std::vector<NodeAddress> known;
  for (const auto& [name, node] : nodes_) known.push_back({node->options.host, node->options.port});
  std::string failures;
  NodeFailures failed;
  for (const NodeAddress& candidate : map_candidates(known, options_.seeds, suspects_)) {
    std::vector<SlotOwner> owners;
    try {
      owners = co_await read_map(candidate);
    } catch (const Error& e) {
      failures += std::string(" ") + e.what() + ";";
      failed.add(e);
      suspects_.insert(address_text(candidate));
      continue;
    }
    suspects_.erase(address_text(candidate));
    if (owners.empty()) {
      failures += " " + address_text(candidate) + ": no slots assigned;";
      failed.add_unclassified();
      continue;
    }
    if (closed_) co_return;  // closed while reading: nothing to route for
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
    refresh_failure_ = nullptr;
    co_return;
  }
  // A wrong password on every node is an AuthError here too (not "unavailable").
  try {
    failed.throw_summary("cluster map on " + options_.endpoint() + ": no node answered CLUSTER SHARDS/SLOTS:" + failures);
  } catch (...) {
    refresh_failure_ = std::current_exception();  // for the callers waiting for this read
  }
}

asio::awaitable<std::vector<SlotOwner>> AsyncCluster::read_map(const NodeAddress& from) {
  // Its own short-lived connection: a master's command connection may be
  // stuck behind a deep pipeline. Bounded by its budget, not by a caller.
  auto connection = std::make_shared<AsyncConnection>(executor_, node_options(options_, from));
  const auto bound = Clock::now() + map_read_budget(options_);
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

void AsyncCluster::suspect(const Node& node) noexcept {
  stale_ = true;
  try {
    suspects_.insert(address_text({node.options.host, node.options.port}));
  } catch (...) {
  }
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
  const auto bound = routing_bound(options_, until, Clock::now());
  RetryBackoff backoff(bound);
  bool asking = false;
  NodeAddress ask_target;
  Routed routed;
  // MOVED/ASK count against kMaxRoutedAttempts (a redirection loop);
  // waits for a migration or failover (TRYAGAIN, CLUSTERDOWN, no owner,
  // connection refused) only against the time bound (and kMaxRoutedWaits): a
  // slot's migration outlasts 16 short back-offs.
  int redirects = 0;
  for (int attempt = 1;; ++attempt) {
    std::shared_ptr<Node> node;
    std::exception_ptr refused;  // a refusal to retry after a pause (no co_await inside a handler)
    try {
      // (GCC 12 miscompiles co_await in a conditional expression: an if.)
      if (asking) node = node_at(ask_target);
      else node = co_await node_for_slot(slot, bound);
    } catch (const ServerBusyError&) {
      // No master serves the slot right now (a failover under way).
      refused = std::current_exception();
    }
    if (!refused && !node) {
      // The deadline passed while the map was read: nothing was sent.
      routed.outcome.ended = AsyncConnection::Ended::deadline;
      co_return routed;
    }
    if (refused) {
      const auto pause = attempt < kMaxRoutedWaits ? backoff.next() : Clock::duration::zero();
      if (pause == Clock::duration::zero()) std::rethrow_exception(refused);
      co_await sleep_for(executor_, pause);
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
      suspect(*node);
      asking = false;
      refused = std::current_exception();
    } catch (const IoError&) {
      suspect(*node);
      throw;
    }
    if (refused) {
      const auto pause = attempt < kMaxRoutedWaits ? backoff.next() : Clock::duration::zero();
      if (pause == Clock::duration::zero()) std::rethrow_exception(refused);
      co_await sleep_for(executor_, pause);
      continue;
    }
    if (routed.outcome.ended == AsyncConnection::Ended::deadline) suspect(*node);  // silent: frozen, maybe failed over
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
      const auto pause = backoff.next();
      if (pause == Clock::duration::zero()) co_return routed;
      co_await sleep_for(executor_, pause);
    }
  }
}

asio::awaitable<std::shared_ptr<AsyncSubscriber>> AsyncCluster::subscriber_for(std::string_view key,
                                                                               Clock::time_point until) {
  auto self = shared_from_this();
  const std::string copy(key);  // a coroutine parameter view must not dangle across suspension
  auto node = co_await node_for_slot(key_slot(copy), until);
  if (!node) co_return nullptr;  // the deadline passed while the map was read
  if (!node->subscriber)
    node->subscriber = std::make_shared<AsyncSubscriber>(executor_, node->options, reconnect_delay_, true, subscriber_id_);
  co_return node->subscriber;
}

}  // namespace lockon::detail
