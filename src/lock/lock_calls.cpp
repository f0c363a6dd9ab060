#include "lock/lock_calls.hpp"

#include <array>
#include <string>
#include <vector>

#include "client/error_map.hpp"
#include "client/pipeline.hpp"
#include "client/routed.hpp"
#include "common/token.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/errors.hpp"
#include "lock/orphans.hpp"

namespace lockon::detail {

LockCalls::LockCalls(std::shared_ptr<ClientImpl> client, std::string name)
    : client_(std::move(client)),
      keys_(lock_script_keys(name)),
      sharded_(sharded_wake(*client_)) {}


namespace {

using SteadyClock = std::chrono::steady_clock;

// Auto-pipelining (ConnectionOptions::auto_pipeline): one server only (the
// redirections and failover reports of routed_call stay with the pool).
// Null when off.
// (One server only, so routed_call's one-server rule holds here too: a
// MOVED or ASK is a ConfigError, check_not_cluster_redirect.)
Pipeline* shared_pipeline(ClientImpl& client, std::string_view key, std::shared_ptr<Node>& node) {
  if (!client.options().auto_pipeline || client.options().deployment != Deployment::standalone) return nullptr;
  node = client.node_for(key);
  return node->pipeline();
}

// One command through the shared connection; null when `until` passed (as
// read_bounded below: outcome unknown, the reply dropped when it comes). A
// TimeoutError from the socket timeout (the server stalled with replies
// owed) is thrown (outcome unknown).
ReplyPtr pipelined(Pipeline& pipeline, std::span<const std::string_view> args, std::string_view operation,
                   SteadyClock::time_point until) {
  try {
    return pipeline.call(args, until, operation);
  } catch (const TimeoutError&) {
    if (until != SteadyClock::time_point::max() && SteadyClock::now() >= until) return nullptr;
    throw;
  }
}

// EVALSHA, and EVAL if the server answers NOSCRIPT: two independent calls
// (EVAL is self-contained), so they need not be contiguous.
template <std::size_t N>
ReplyPtr pipelined_eval(Pipeline& pipeline, const Script& script, const std::array<std::string_view, N>& keys,
                        std::span<const std::string_view> args, std::string_view operation, SteadyClock::time_point until) {
  const std::string count = std::to_string(N);
  std::vector<std::string_view> command;
  command.reserve(3 + N + args.size());
  command.insert(command.end(), {std::string_view("EVALSHA"), std::string_view(script.sha()), std::string_view(count)});
  command.insert(command.end(), keys.begin(), keys.end());
  command.insert(command.end(), args.begin(), args.end());
  ReplyPtr reply = pipelined(pipeline, command, operation, until);
  if (!reply || !is_noscript(*reply)) return reply;
  command[0] = "EVAL";
  command[1] = script.body();
  return pipelined(pipeline, command, operation, until);
}

// `script` on the node serving `name` (the shared pipeline when on), with
// `keys` and the arguments `args_for(node)` gives for that node; error
// replies are thrown (mapped). Null when `until` (time_point::max(): none)
// passed before the reply came.
template <std::size_t N, class ArgsFor>
ReplyPtr run_on_key_node(ClientImpl& client, const std::string& name, const std::array<std::string_view, N>& keys,
                         const Script& script, std::string_view operation, ArgsFor&& args_for,
                         SteadyClock::time_point until = SteadyClock::time_point::max()) {
  std::shared_ptr<Node> shared_node;
  if (Pipeline* pipeline = shared_pipeline(client, name, shared_node)) {
    ReplyPtr reply = pipelined_eval(*pipeline, script, keys, args_for(*shared_node), operation, until);
    check_not_cluster_redirect(reply, shared_node->endpoint());
    if (reply) check_reply(*reply, shared_node->endpoint(), operation);
    return reply;
  }
  std::string endpoint;
  ReplyPtr reply = routed_call(client, name, until, [&](Connection& connection, Node& node) -> ReplyPtr {
    endpoint = node.endpoint();
    if (!connection.ensure_connected_by(until)) return nullptr;  // the deadline passed while connecting
    return eval_bounded(connection, script, keys, args_for(node), operation, until);
  });
  if (reply) check_reply(*reply, endpoint, operation);
  return reply;
}

}  // namespace

ReplyPtr LockCalls::run_lock_script(const Script& script, std::span<const std::string_view> args, std::string_view operation) {
  return run_lock_script_until(script, args, operation, Clock::time_point::max());
}

ReplyPtr LockCalls::run1_as_process(const Script& script, std::span<const std::string_view> args,
                                    std::string_view operation) {
  return run1_as_process_until(script, args, operation, Clock::time_point::max());
}

ReplyPtr LockCalls::run1_as_process_until(const Script& script, std::span<const std::string_view> args,
                                          std::string_view operation, Clock::time_point until) {
  const std::array<std::string_view, 3> keys{name(), who_key(), keys_[6]};
  std::vector<std::string_view> all_args(args.begin(), args.end());
  all_args.emplace_back();
  std::string process;
  return run_on_key_node(*client_, name(), keys, script, operation, [&](Node& node) {
    // The server serving the key now (after a redirection too).
    process = subscriber_or_process_id(node.subscriber_id_if_started());
    all_args.back() = process;
    return std::span<const std::string_view>(all_args);
  }, until);
}

ReplyPtr LockCalls::run1(const Script& script, std::span<const std::string_view> args, std::string_view operation) {
  const std::array<std::string_view, 2> keys{name(), who_key()};
  return run_on_key_node(*client_, name(), keys, script, operation, [args](Node&) { return args; });
}

ReplyPtr LockCalls::command(std::span<const std::string_view> args, std::string_view operation) {
  return command_until(args, operation, Clock::time_point::max());
}

// Reads the pending reply, waiting at most the socket timeout or `until`,
// whichever comes first. Null when `until` came first and passed (the
// connection is then marked broken: the reply is still owed).
ReplyPtr read_bounded(Connection& connection, std::string_view operation, std::chrono::steady_clock::time_point until,
                      std::chrono::milliseconds server_wait) {
  using Clock = std::chrono::steady_clock;
  const auto socket_timeout = connection.options().socket_timeout;
  if (server_wait.count() > 0 && socket_timeout.count() > 0) {
    // WAIT answers only when enough replicas acknowledged or its own timeout
    // ended: with that timeout >= the socket timeout, a slow replica would
    // otherwise turn into a TimeoutError (outcome unknown) instead of the
    // ReplicationError WAIT's answer leads to.
    const auto bound = Clock::now() + socket_timeout + server_wait;
    const auto limit = std::min(until, bound);
    try {
      return connection.read_reply_until(limit, operation);
    } catch (const TimeoutError&) {
      if (limit == until) return nullptr;  // the caller's deadline passed first
      throw;
    }
  }
  bool deadline_first = false;
  try {
    return connection.read_reply_by(until, operation, &deadline_first);
  } catch (const TimeoutError&) {
    if (deadline_first) return nullptr;  // the caller's deadline passed first
    throw;
  }
}

ReplyPtr eval_bounded(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                      std::span<const std::string_view> args, std::string_view operation,
                      std::chrono::steady_clock::time_point until) {
  append_evalsha(connection, script, keys, args);
  ReplyPtr first = read_bounded(connection, operation, until);
  if (!first || !is_noscript(*first)) return first;
  // NOSCRIPT (first use on this server: a restart, or the new master after
  // a failover, whose script cache is empty) is redone with EVAL, read by
  // the same deadline: resolve_noscript's read waits the socket timeout, so
  // a deadline that passed while the new master was slow was overrun by up
  // to that much (test_sentinel_move_deadline.cpp: a wait's first script
  // on the new master after a failover).
  append_eval(connection, script, keys, args);
  return read_bounded(connection, operation, until);
}

ReplyPtr LockCalls::run_lock_script_until(const Script& script, std::span<const std::string_view> args,
                               std::string_view operation, Clock::time_point until) {
  return run_on_key_node(*client_, name(), key_views(keys_), script, operation, [args](Node&) { return args; }, until);
}

ReplyPtr LockCalls::command_until(std::span<const std::string_view> args, std::string_view operation,
                                  Clock::time_point until) {
  std::shared_ptr<Node> shared_node;
  if (Pipeline* pipeline = shared_pipeline(*client_, name(), shared_node)) {
    ReplyPtr reply = pipelined(*pipeline, args, operation, until);
    check_not_cluster_redirect(reply, shared_node->endpoint());
    if (reply) check_reply(*reply, shared_node->endpoint(), operation);
    return reply;
  }
  std::string endpoint;
  ReplyPtr reply = routed_call(*client_, name(), until, [&](Connection& connection, Node& node) {
    endpoint = node.endpoint();
    if (!connection.ensure_connected_by(until)) return ReplyPtr{};  // the deadline passed while connecting
    connection.append(args);
    return read_bounded(connection, operation, until);
  });
  if (reply) check_reply(*reply, endpoint, operation);
  return reply;
}

std::vector<ReplyPtr> LockCalls::pipeline_until(std::span<const std::span<const std::string_view>> commands,
                                               std::string_view operation, Clock::time_point until,
                                               std::chrono::milliseconds last_waits) {
  std::shared_ptr<Node> shared_node;
  // A pipeline ending in WAIT (replica acks) never takes the shared
  // connection: WAIT holds its connection's replies for up to its timeout,
  // which would stall every other caller's replies behind it, and its reply
  // must be read for socket timeout + WAIT timeout (read_bounded below).
  Pipeline* pipeline = last_waits.count() == 0 ? shared_pipeline(*client_, name(), shared_node) : nullptr;
  if (pipeline != nullptr) {
    try {
      std::vector<ReplyPtr> replies = pipeline->call_many(commands, until, operation);  // adjacent in one write
      check_not_cluster_redirect(replies, shared_node->endpoint());
      return replies;
    } catch (const TimeoutError&) {
      if (until != Clock::time_point::max() && Clock::now() >= until) return {};
      throw;
    }
  }
  // Replies of a pipeline partly refused (partly_refused, routed.hpp):
  // returned as they are, never resent; the caller reads a refused command
  // as not done.
  std::vector<ReplyPtr> partial;
  std::vector<ReplyPtr> result = routed_call(*client_, name(), until, [&](Connection& connection, Node&) {
    // The deadline passed while connecting: nothing was sent.
    if (!connection.ensure_connected_by(until)) return std::vector<ReplyPtr>{};
    for (const auto& command : commands) connection.append(command);
    std::vector<ReplyPtr> replies;
    replies.reserve(commands.size());
    for (std::size_t i = 0; i < commands.size(); ++i) {
      const bool last = i + 1 == commands.size();
      ReplyPtr reply = read_bounded(connection, operation, until, last ? last_waits : std::chrono::milliseconds(0));
      if (!reply) return std::vector<ReplyPtr>{};
      replies.push_back(std::move(reply));
    }
    if (partly_refused(commands, replies)) {
      partial = std::move(replies);
      return std::vector<ReplyPtr>{};  // no replies: routed_call sends nothing again
    }
    return replies;
  });
  if (!partial.empty()) return partial;
  return result;
}

void LockCalls::abandon(const std::string& entry, bool unknown_outcome) const noexcept {
  try {
    // The script's SHA1 is computed here, on the caller's thread, not by the
    // clean-up thread: OpenSSL's per-thread state allocated while a thread
    // first uses it is never freed (LeakSanitizer reports it).
    (void)scripts::cancel_wait(sharded_).sha();
    Orphans::instance().adopt(Orphan{client_, keys_, entry, unknown_outcome, entry_token(entry)});
  } catch (...) {
  }
}

long long LockCalls::cancel_now(const std::string& entry, std::chrono::milliseconds grace, bool late_request) noexcept {
  try {
    const std::array<std::string_view, 1> args{entry};
    const ReplyPtr reply = run_lock_script_until(scripts::cancel_wait(sharded_), args, "cancel wait", Clock::now() + grace);
    if (reply && reply->type == REDIS_REPLY_INTEGER) {
      if (late_request) abandon(entry, true);
      return reply->integer;
    }
  } catch (...) {
  }
  abandon(entry, true);
  return -1;
}

}  // namespace lockon::detail
