#include "redlock/redlock_nodes.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "client/client_impl.hpp"
#include "client/error_map.hpp"
#include "client/fanout.hpp"
#include "client/routed.hpp"
#include "lock/orphans.hpp"
#include "lockon/errors.hpp"
#include "client/pool.hpp"

namespace lockon {

std::string_view to_string(NodeOperation operation) noexcept {
  switch (operation) {
    case NodeOperation::probe: return "probe";
    case NodeOperation::acquire: return "acquire";
    case NodeOperation::fence: return "fence";
    case NodeOperation::extend: return "extend";
    case NodeOperation::release: return "release";
    case NodeOperation::check: return "check";
  }
  return "unknown";
}

std::string_view to_string(NodeOutcome outcome) noexcept {
  switch (outcome) {
    case NodeOutcome::ok: return "ok";
    case NodeOutcome::refused: return "refused";
    case NodeOutcome::failed: return "failed";
  }
  return "unknown";
}

namespace detail {
namespace redlock_scripts {

const Script& acquire_fenced() {
  static const Script script(
      "local counter = redis.call('GET', KEYS[2]) or '0'\n"
      // Microseconds as a string: TIME's two parts joined, no Lua doubles.
      "local now = redis.call('TIME')\n"
      "local micros = now[1] .. string.format('%06d', tonumber(now[2]))\n"
      "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, counter, micros} end\n"
      "return {0, counter, micros}\n");
  return script;
}

const Script& write_fence() {
  // Counters are compared as canonical decimal strings (length first), so
  // the full 64-bit range survives Lua's doubles.
  static const Script script(
      "local current = redis.call('GET', KEYS[2])\n"
      "local fence = ARGV[2]\n"
      "if not current or #current < #fence or (#current == #fence and current < fence) then\n"
      "  redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])\n"
      "else\n"
      "  redis.call('PEXPIRE', KEYS[2], ARGV[3])\n"
      "end\n"
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end\n"
      "return 0\n");
  return script;
}

const Script& extend() {
  static const Script script(
      "local holder = redis.call('GET', KEYS[1])\n"
      "if holder == ARGV[1] then\n"
      "  local ms = tonumber(ARGV[2])\n"
      "  local pttl = redis.call('PTTL', KEYS[1])\n"
      "  if pttl < 0 then pttl = 0 end\n"
      "  if ARGV[3] == 'add' then redis.call('PEXPIRE', KEYS[1], pttl + ms)\n"
      "  elseif ARGV[3] == 'set' or ms > pttl then redis.call('PEXPIRE', KEYS[1], ms) end\n"
      "  return 1\n"
      "end\n"
      "if not holder then\n"
      "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])\n"
      "  return 2\n"
      "end\n"
      "return 0\n");
  return script;
}

const Script& release() {
  static const Script script(
      "local holder = redis.call('GET', KEYS[1])\n"
      "if holder == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end\n"
      "if not holder then return 0 end\n"
      "return -1\n");
  return script;
}

}  // namespace redlock_scripts

std::string NodeReply::error_text() const {
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "unknown error";
    }
  }
  if (!reply) return "no reply";
  if (is_error_reply(*reply)) return scrub_server_error({reply->str, reply->len});
  return {};
}

std::chrono::steady_clock::duration drift_allowance(std::chrono::milliseconds ttl, double drift_factor) {
  const double micros = static_cast<double>(ttl.count()) * 1000.0 * drift_factor;
  return std::chrono::microseconds(static_cast<long long>(std::ceil(micros))) + std::chrono::milliseconds(2);
}

std::optional<std::uint64_t> parse_counter(std::string_view text) noexcept {
  if (text.empty() || text.size() > 20 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::optional<std::uint64_t> fence_candidate(const redisReply& r) noexcept {
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[0]->type != REDIS_REPLY_INTEGER ||
      r.element[1]->type != REDIS_REPLY_STRING || r.element[2]->type != REDIS_REPLY_STRING)
    return std::nullopt;
  const auto counter = parse_counter(std::string_view(r.element[1]->str, r.element[1]->len));
  const auto micros = parse_counter(std::string_view(r.element[2]->str, r.element[2]->len));
  if (!counter || !micros) return std::nullopt;
  const std::uint64_t next = *counter == std::numeric_limits<std::uint64_t>::max() ? *counter : *counter + 1;
  return std::max(next, *micros);
}

std::chrono::milliseconds auto_per_node_timeout(std::chrono::milliseconds ttl) noexcept {
  using std::chrono::milliseconds;
  const milliseconds scaled = std::clamp(ttl / 100, milliseconds(25), milliseconds(200));
  return std::max(std::min(scaled, ttl / 4), milliseconds(1));
}

std::string redact(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  constexpr std::string_view kMark = "<token>";
  // Resume after the mark: a (custom) token may occur inside it.
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + kMark.size()))
    text.replace(at, secret.size(), kMark);
  return text;
}

RedlockNodes::RedlockNodes(std::vector<Client> clients, std::string name, std::chrono::milliseconds per_node_timeout,
                           std::function<void(const NodeEvent&)> on_event)
    : clients_(std::move(clients)),
      name_(std::move(name)),
      per_node_timeout_(per_node_timeout),
      on_event_(std::move(on_event)) {
  if (clients_.empty()) throw ConfigError("redlock '" + name_ + "': at least one node is required");
  std::set<std::string> seen;
  endpoints_.reserve(clients_.size());
  for (const Client& client : clients_) {
    std::string endpoint = client.endpoint();
    // A Redlock node talks to one server (its pool); a cluster would need
    // routing per key there, which Redlock does not do.
    if (client.options().deployment == Deployment::cluster)
      throw ConfigError("redlock '" + name_ + "': node " + endpoint +
                        " is a Redis Cluster; Redlock nodes must be single servers (use Lock on a cluster)");
    // Under Sentinel a node's server changes at a failover, and an
    // asynchronously replicated grant can vanish: not an independent node.
    if (client.options().deployment == Deployment::sentinel)
      throw ConfigError("redlock '" + name_ + "': node " + client.endpoint() +
                        " is a Sentinel deployment; Redlock nodes must be single servers (use Lock with Sentinel)");
    // Two handles on one server (even on different databases) would let
    // that server vote twice: the majority would no longer be one.
    if (!seen.insert(endpoint).second)
      throw ConfigError("redlock '" + name_ + "': node " + endpoint + " is listed twice; nodes must be independent servers");
    endpoints_.push_back(std::move(endpoint));
  }
  next_probe_ns_ = std::make_unique<std::atomic<std::int64_t>[]>(clients_.size());
  for (std::size_t i = 0; i < clients_.size(); ++i) next_probe_ns_[i].store(0, std::memory_order_relaxed);
}

namespace {
std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

bool RedlockNodes::grace_for(std::size_t node) const noexcept {
  auto& next = next_probe_ns_[node];
  const std::int64_t due = next.load(std::memory_order_relaxed);
  if (due == 0) return true;
  const std::int64_t now = steady_ns();
  if (now < due) return false;
  // This fan-out probes it; the others keep deciding without it meanwhile.
  next.store(now + std::chrono::nanoseconds(kSuspectProbeEvery).count(), std::memory_order_relaxed);
  return true;
}

void RedlockNodes::note_outcome(std::size_t node, bool abandoned, bool answered) const noexcept {
  auto& next = next_probe_ns_[node];
  if (answered) {
    next.store(0, std::memory_order_relaxed);
  } else if (abandoned && next.load(std::memory_order_relaxed) == 0) {
    next.store(steady_ns() + std::chrono::nanoseconds(kSuspectProbeEvery).count(), std::memory_order_relaxed);
  }
}

std::vector<NodeReply> RedlockNodes::run(const std::function<void(Connection&)>& send,
                                         const std::function<ReplyPtr(Connection&, ReplyPtr)>& finish,
                                         std::string_view operation, std::chrono::milliseconds timeout,
                                         Clock::time_point not_after, const Voter& voter) const {
  const auto start = Clock::now();
  const auto deadline = window(start, timeout, not_after);
  const auto since_start = [start] {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  };
  const std::size_t n = clients_.size();
  std::vector<NodeReply> out(n);
  std::vector<std::optional<Pool::Lease>> leases(n);
  std::vector<FanOutTarget> targets;
  std::vector<std::size_t> index;
  targets.reserve(n);
  index.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    try {
      leases[i].emplace(clients_[i].impl()->pool().borrow());
    } catch (...) {
      out[i].error = std::current_exception();
      out[i].elapsed = since_start();
      continue;
    }
    FanOutTarget target;
    target.connection = &**leases[i];
    target.send = send;
    target.finish = [&out, &finish, &since_start, i](Connection& connection, ReplyPtr reply) {
      if (finish) reply = finish(connection, std::move(reply));
      out[i].elapsed = since_start();
      return reply;
    };
    target.grace_after_decided = !voter || grace_for(i);
    targets.push_back(std::move(target));
    index.push_back(i);
  }
  FanOutEnough enough;
  if (voter) {
    // Nodes whose pool could not lend a connection already count as no.
    std::size_t unavailable = 0;
    for (const NodeReply& node : out)
      if (node.error) ++unavailable;
    enough = [&voter, unavailable, n, q = quorum()](std::span<const FanOutResult> results) {
      std::size_t yes = 0;
      std::size_t no = unavailable;
      for (const FanOutResult& result : results) {
        if (result.error) ++no;
        else if (result.reply) ++(!is_error_reply(*result.reply) && voter(*result.reply) == Vote::yes ? yes : no);
      }
      return yes >= q || no > n - q;
    };
  }
  std::vector<FanOutResult> results = fan_out_until_enough(targets, deadline, operation, enough);
  for (std::size_t k = 0; k < index.size(); ++k) {
    NodeReply& node = out[index[k]];
    node.reply = std::move(results[k].reply);
    node.error = results[k].error;
    node.sent = results[k].sent;
    node.abandoned = results[k].abandoned;
    if (voter) note_outcome(index[k], node.abandoned, node.reply != nullptr);
    if (node.error) node.elapsed = since_start();
  }
  return out;
}

RedlockNodes::Clock::time_point RedlockNodes::window(Clock::time_point start, std::chrono::milliseconds timeout,
                                                     Clock::time_point not_after) noexcept {
  const auto full = start + timeout;
  if (not_after >= full) return full;
  return std::max(not_after, start + std::min(timeout, kOneRoundTrip));
}

std::vector<NodeReply> RedlockNodes::command(std::span<const std::string_view> args, std::string_view operation,
                                             std::optional<std::chrono::milliseconds> timeout,
                                             Clock::time_point not_after, const Voter& voter) const {
  return run([args](Connection& connection) { connection.append(args); }, {}, operation,
             timeout.value_or(per_node_timeout_), not_after, voter);
}

void RedlockNodes::run_in_background(std::size_t node, const Script& script, std::vector<std::string> keys,
                                     std::vector<std::string> args, Clock::time_point give_up_at) const noexcept {
  // Servers with a background job pending, in this process (every Redlock
  // object shares them): one at a time per server, later ones are left to
  // the TTL. Leaked on purpose: jobs may end during static destruction.
  static std::mutex& busy_mutex = *new std::mutex;
  static std::set<std::string>& busy = *new std::set<std::string>;
  try {
    {
      std::lock_guard guard(busy_mutex);
      if (!busy.insert(endpoints_[node]).second) return;
    }
    // Frees the server's place when the job ends, however it ends (built in
    // place: a moved-from temporary's destructor would free it at once).
    struct Done {
      std::string endpoint;
      ~Done() {
        std::lock_guard guard(busy_mutex);
        busy.erase(endpoint);
      }
    };
    const std::shared_ptr<Done> done(new Done{endpoints_[node]});
    auto attempts = std::make_shared<int>(0);
    Orphan orphan;
    orphan.client = clients_[node].impl();
    orphan.keys[0] = keys.empty() ? name_ : keys.front();
    // `script` is a function-local static (redlock_scripts): it outlives the job.
    orphan.clean = [client = orphan.client, &script, keys = std::move(keys), args = std::move(args), give_up_at,
                    timeout = per_node_timeout_, done, attempts](Clock::time_point deadline) {
      // Expired by its TTL, or tried enough: the TTL does the rest.
      if (Clock::now() >= give_up_at || ++*attempts > kBackgroundAttempts) return true;
      const std::vector<std::string_view> key_views(keys.begin(), keys.end());
      const std::vector<std::string_view> arg_views(args.begin(), args.end());
      const ReplyPtr reply =
          routed_call(*client, key_views.empty() ? std::string_view() : key_views.front(),
                      std::min(deadline, Clock::now() + timeout),
                      [&](Connection& connection, Node&) {
                        // Each read within per_node_timeout, not the socket
                        // timeout a (re)connection sets: a paused node must
                        // hold the shared clean-up thread no longer than a
                        // fan-out would (found by RedlockBackgroundAttack).
                        connection.ensure_connected();
                        const Connection::ScopedTimeout bounded(&connection, timeout);
                        return eval(connection, script, key_views, arg_views, "redlock release (retried)");
                      });
      return reply && reply->type == REDIS_REPLY_INTEGER;
    };
    Orphans::instance().adopt(std::move(orphan));
  } catch (...) {
    // No memory: the key expires by its TTL (and the server's place may stay
    // taken: no more background jobs for it, the behaviour before them).
  }
}

std::vector<NodeReply> RedlockNodes::script(const Script& script, std::span<const std::string_view> keys,
                                            std::span<const std::string_view> args, std::string_view operation,
                                            Clock::time_point not_after, const Voter& voter) const {
  return run([&](Connection& connection) { append_evalsha(connection, script, keys, args); },
             [&](Connection& connection, ReplyPtr reply) {
               return resolve_noscript(connection, script, keys, args, std::move(reply), operation);
             },
             operation, per_node_timeout_, not_after, voter);
}

void RedlockNodes::report(std::size_t node, NodeOperation operation, NodeOutcome outcome, std::string detail,
                          std::chrono::microseconds elapsed, std::string_view token) const noexcept {
  if (!on_event_) return;
  try {
    NodeEvent event{name_, endpoints_[node], operation, outcome, redact(std::move(detail), token), elapsed};
    on_event_(event);
  } catch (...) {
    // A logging hook must never break the lock.
  }
}

std::string Tally::nodes_with(const RedlockNodes& nodes, NodeOutcome outcome) const {
  std::string out;
  for (std::size_t i = 0; i < outcomes.size(); ++i)
    if (outcomes[i] == outcome) out += (out.empty() ? "" : ", ") + nodes.endpoint(i);
  return out.empty() ? "none" : out;
}

std::string Tally::failed_nodes(const RedlockNodes& nodes) const {
  std::string out;
  for (const auto& [node, text] : failures) out += (out.empty() ? "" : "; ") + nodes.endpoint(node) + " (" + text + ")";
  return out.empty() ? "none" : out;
}

std::string Tally::summary(const RedlockNodes& nodes) const {
  return std::to_string(ok) + " of " + std::to_string(nodes.size()) + " nodes (a majority is " +
         std::to_string(nodes.quorum()) + "); ok: " + nodes_with(nodes, NodeOutcome::ok) +
         "; refused: " + nodes_with(nodes, NodeOutcome::refused) + "; failed: " + failed_nodes(nodes);
}

}  // namespace detail
}  // namespace lockon
