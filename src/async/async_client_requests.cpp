// AsyncClientImpl's requests: a command, a script, a pipeline — routed to
// a Cluster's slot owner (AsyncCluster) or to the master (on_master).
#include <asio/experimental/as_tuple.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>

#include <exception>
#include <optional>

#include "async/async_client_impl.hpp"
#include "client/error_map.hpp"
#include "client/retry_rules.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

asio::awaitable<AsyncClientImpl::OnMaster> AsyncClientImpl::on_master(std::string resp, std::size_t replies,
                                                                      Clock::time_point until,
                                                                      std::string_view operation) {
  ReadOnlyRetry readonly_retry(sentinel_, routing_bound(options_, until, Clock::now()));
  std::optional<asio::steady_timer> pause_timer;  // made on the first pause only
  for (;;) {
    std::optional<Clock::duration> pause;
    std::shared_ptr<AsyncConnection> connection;
    std::exception_ptr no_master;
    try {
      connection = co_await route(until);
    } catch (const ConnectError&) {
      no_master = std::current_exception();  // the sentinels name no master (yet)
    }
    if (no_master) {
      pause = readonly_retry.after_no_master();
      if (!pause) std::rethrow_exception(no_master);
    } else {
      AsyncConnection::Outcome outcome;
      try {
        outcome = co_await connection->exchange(resp, replies, until, operation);
      } catch (const IoError&) {
        mark_stale(*connection);
        throw;
      }
      if (outcome.ended != Ended::replied || first_readonly(outcome.replies) == nullptr)
        co_return OnMaster{std::move(connection), std::move(outcome)};
      mark_stale(*connection);  // demoted: the next request resolves the master again
      pause = readonly_retry.after_readonly(!nothing_ran(outcome.replies));
      if (!pause) co_return OnMaster{std::move(connection), std::move(outcome)};
    }
    if (!pause_timer) pause_timer.emplace(executor_);
    pause_timer->expires_after(*pause);
    co_await pause_timer->async_wait(asio::experimental::as_tuple(asio::use_awaitable));
  }
}

asio::awaitable<AsyncConnection::Outcome> AsyncClientImpl::exchange_aside(std::string resp, std::size_t replies,
                                                                          Clock::time_point until,
                                                                          std::string_view operation) {
  if (cluster_) throw ConfigError(std::string(operation) + ": not on a Redis Cluster with the async client");
  const std::shared_ptr<AsyncConnection> main = co_await route(until);
  // One connection per request in flight (concurrent WAITs do not queue
  // behind each other), kept for reuse while idle.
  std::shared_ptr<AsyncConnection> aside;
  while (!aside_idle_.empty() && !aside) {
    aside = std::move(aside_idle_.back());
    aside_idle_.pop_back();
    if (aside->endpoint() != main->endpoint()) {  // the master switched
      aside->close();
      aside.reset();
    }
  }
  if (!aside) {
    ConnectionOptions options = main->options();
    options.socket_timeout = std::chrono::milliseconds(0);
    aside = std::make_shared<AsyncConnection>(executor_, std::move(options));
  }
  AsyncConnection::Outcome outcome;
  try {
    outcome = co_await aside->exchange(std::move(resp), replies, until, operation);
  } catch (const IoError&) {
    aside->close();
    throw;
  }
  // Unanswered at its bound, or cancelled: its reply is still owed, and
  // the next request must not queue behind it.
  if (outcome.ended == Ended::replied && aside_idle_.size() < kMaxIdleAside) aside_idle_.push_back(std::move(aside));
  else aside->close();
  co_return outcome;
}

asio::awaitable<AsyncClientImpl::Answer> AsyncClientImpl::command(std::span<const std::string_view> args,
                                                                  std::string_view operation,
                                                                  Clock::time_point until) {
  std::string resp;
  append_resp(resp, args);
  if (cluster_) {
    auto cluster = cluster_;
    // (Not a conditional expression in the co_await statement: GCC 12
    // miscompiles those.)
    std::string_view key;
    if (args.size() > 1) key = args[1];
    auto routed = co_await cluster->exchange(key, resp, 1, until, operation);
    if (routed.outcome.ended != Ended::replied) co_return Answer{routed.outcome.ended, nullptr};
    check_reply(*routed.outcome.replies[0], routed.connection->endpoint(), operation);
    co_return Answer{Ended::replied, std::move(routed.outcome.replies[0])};
  }
  auto sent = co_await on_master(std::move(resp), 1, until, operation);
  if (sent.outcome.ended != Ended::replied) co_return Answer{sent.outcome.ended, nullptr};
  check_not_cluster_redirect(*sent.outcome.replies[0], sent.connection->endpoint(), operation);
  check_reply(*sent.outcome.replies[0], sent.connection->endpoint(), operation);
  co_return Answer{Ended::replied, std::move(sent.outcome.replies[0])};
}

asio::awaitable<AsyncClientImpl::Answer> AsyncClientImpl::script(const Script& script,
                                                                 std::span<const std::string_view> keys,
                                                                 std::span<const std::string_view> args,
                                                                 std::string_view operation,
                                                                 Clock::time_point until) {
  if (cluster_) {
    auto cluster = cluster_;
    std::string_view key;
    if (!keys.empty()) key = keys[0];
    for (const bool by_sha : {true, false}) {
      std::string resp;
      append_script(resp, script, by_sha, keys, args);
      auto routed = co_await cluster->exchange(key, resp, 1, until, operation);
      if (routed.outcome.ended != Ended::replied) co_return Answer{routed.outcome.ended, nullptr};
      ReplyPtr reply = std::move(routed.outcome.replies[0]);
      // NOSCRIPT (first use on this master, restart): nothing ran; send the body.
      if (by_sha && is_noscript(*reply)) continue;
      check_reply(*reply, routed.connection->endpoint(), operation);
      co_return Answer{Ended::replied, std::move(reply)};
    }
    throw ProtocolError(std::string(operation) + " on " + endpoint_ + ": NOSCRIPT after EVAL");
  }
  for (const bool by_sha : {true, false}) {
    std::string resp;
    append_script(resp, script, by_sha, keys, args);
    auto sent = co_await on_master(std::move(resp), 1, until, operation);
    if (sent.outcome.ended != Ended::replied) co_return Answer{sent.outcome.ended, nullptr};
    ReplyPtr reply = std::move(sent.outcome.replies[0]);
    // NOSCRIPT (first use, restart): nothing ran; send the body.
    if (by_sha && is_noscript(*reply)) continue;
    check_not_cluster_redirect(*reply, sent.connection->endpoint(), operation);
    check_reply(*reply, sent.connection->endpoint(), operation);
    co_return Answer{Ended::replied, std::move(reply)};
  }
  throw ProtocolError(std::string(operation) + " on " + endpoint_ + ": NOSCRIPT after EVAL");
}

asio::awaitable<AsyncConnection::Outcome> AsyncClientImpl::pipeline(
    std::span<const std::span<const std::string_view>> commands, std::string_view operation,
    Clock::time_point until) {
  std::string resp;
  for (const auto& command : commands) append_resp(resp, command);
  if (cluster_) {
    // The first command naming a key (MULTI names none; a script's first
    // key follows its SHA or body and the key count).
    std::string_view key;
    for (const auto& command : commands) {
      if (command.size() > 3 && (command[0] == "EVALSHA" || command[0] == "EVAL")) {
        key = command[3];
        break;
      }
      if (command.size() > 1) {
        key = command[1];
        break;
      }
    }
    auto cluster = cluster_;
    auto routed = co_await cluster->exchange(key, resp, commands.size(), until, operation, commands);
    co_return std::move(routed.outcome);
  }
  auto sent = co_await on_master(std::move(resp), commands.size(), until, operation);
  for (const auto& reply : sent.outcome.replies) {
    // A MOVED or ASK: the URL names a cluster node (error_map.hpp).
    if (reply) check_not_cluster_redirect(*reply, sent.connection->endpoint(), operation);
  }
  co_return std::move(sent.outcome);
}

}  // namespace lockon::detail
