#include "client/sentinel_topology.hpp"

#include <poll.h>

#include <algorithm>
#include <array>

#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

namespace {

std::string_view text_of(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_ERROR)
    return {reply.str, reply.len};
  return {};
}

}  // namespace

// Options for one sentinel: its address, the sentinel credentials, db 0.
ConnectionOptions sentinel_options(const ConnectionOptions& base, const NodeAddress& address) {
  ConnectionOptions out = base;
  out.deployment = Deployment::standalone;
  out.seeds.clear();
  out.host = address.host;
  out.port = address.port;
  out.unix_path.clear();
  out.db = 0;
  out.user = base.sentinel_user;
  out.password = base.sentinel_password;
  return out;
}

// Options for the master at `host:port`: the URL's credentials and db.
ConnectionOptions master_options(const ConnectionOptions& base, std::string host, int port) {
  ConnectionOptions out = base;
  out.deployment = Deployment::standalone;
  out.seeds.clear();
  out.host = std::move(host);
  out.port = port;
  out.unix_path.clear();
  return out;
}

std::vector<NodeAddress> sentinels_of(const ConnectionOptions& options) {
  if (!options.seeds.empty()) return options.seeds;
  return {NodeAddress{options.host, options.port}};
}

MasterAddressAnswer read_master_address(const redisReply& reply) {
  MasterAddressAnswer answer;
  if (reply.type == REDIS_REPLY_NIL) {
    answer.unknown = true;
  } else if (reply.type == REDIS_REPLY_ERROR) {
    answer.problem = scrub_server_error(text_of(reply).substr(0, 120));
  } else if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2) {
    answer.problem = "unexpected reply";
  } else {
    answer.address = NodeAddress{std::string(text_of(*reply.element[0])),
                                 std::atoi(std::string(text_of(*reply.element[1])).c_str())};
  }
  return answer;
}

bool role_is_master(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 1 &&
         text_of(*reply->element[0]) == "master";
}

SentinelTopology::SentinelTopology(ConnectionOptions options, PoolOptions limits)
    : options_(std::move(options)), limits_(limits) {
  listener_ = std::thread([this] { listen(); });
}

SentinelTopology::~SentinelTopology() {
  // A resolution still running uses this object: it ends within its budget.
  if (resolution_.valid()) resolution_.wait();
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (listener_.joinable()) listener_.join();
}

std::shared_ptr<Node> SentinelTopology::node_for(std::string_view) { return current(); }

std::shared_ptr<Node> SentinelTopology::node_for(std::string_view, Clock::time_point until) { return current(until); }

std::shared_ptr<Node> SentinelTopology::current(Clock::time_point until) {
  if (!stale_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mutex_);
    if (master_) return master_;
  }
  // One resolution at a time, on its own thread: callers wait for it until
  // their deadline and then use its result. Run by the first caller, it
  // held a try_lock_for(50 ms) for a whole resolution step (2 s behind a
  // silent sentinel), and cut short by a caller's deadline it would fail
  // the callers waiting behind it (found by review, session 18).
  std::shared_future<void> pending;
  {
    std::lock_guard lock(mutex_);
    const bool throttled = Clock::now() < last_resolve_ + kResolveEvery && !urgent_.load();
    if (master_ && (!stale_.load() || throttled)) return master_;
    if (!resolution_.valid() || resolution_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      urgent_.store(false);
      last_resolve_ = Clock::now();
      resolution_ = std::async(std::launch::async, [this] { resolve_and_apply(); }).share();
    }
    pending = resolution_;
  }
  if (until == Clock::time_point::max()) pending.wait();
  else if (pending.wait_until(until) != std::future_status::ready) return nullptr;  // it goes on for the others
  pending.get();  // its ConnectError, if it failed
  std::lock_guard lock(mutex_);
  return master_;
}

void SentinelTopology::resolve_and_apply() {
  ConnectionOptions found;
  try {
    found = resolve();
  } catch (...) {
    std::lock_guard lock(mutex_);
    last_resolve_ = Clock::now();
    throw;
  }
  std::lock_guard lock(mutex_);
  last_resolve_ = Clock::now();
  stale_.store(false, std::memory_order_release);
  if (master_ && master_->options().host == found.host && master_->options().port == found.port) return;
  // A switch: the old Node is dropped here; callers holding it finish with it.
  if (master_) switches_.fetch_add(1);
  master_ = std::make_shared<Node>(found, limits_);
}

ConnectionOptions SentinelTopology::resolve() {
  const auto sentinels = sentinels_of(options_);
  // Bounded as a whole: one sentinel's connect + reply, and the master's,
  // plus slack; a list of dead sentinels costs at most this.
  const auto budget = 2 * (options_.connect_timeout + options_.socket_timeout) + std::chrono::milliseconds(100);
  const auto give_up_at = Clock::now() + budget;
  std::size_t first;
  {
    std::lock_guard lock(mutex_);
    first = preferred_;
  }
  std::string tried;
  NodeFailures failed;
  bool unknown_everywhere = true;
  for (std::size_t i = 0; i < sentinels.size(); ++i) {
    if (i > 0 && Clock::now() >= give_up_at) {
      tried += "; resolution budget of " + std::to_string(budget.count()) + " ms spent";
      failed.add_unclassified();  // the sentinels left untried might have answered
      break;
    }
    const std::size_t index = (first + i) % sentinels.size();
    const ConnectionOptions sentinel = sentinel_options(options_, sentinels[index]);
    const std::string where = sentinel.endpoint();
    try {
      Connection connection(sentinel, ServerRole::sentinel);
      const std::array<std::string_view, 3> ask{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name};
      const ReplyPtr reply = connection.command(ask, "SENTINEL GET-MASTER-ADDR-BY-NAME");
      const MasterAddressAnswer named = read_master_address(*reply);
      if (!named.unknown) unknown_everywhere = false;
      if (!named.address) {
        tried += "; " + where + ": " + (named.unknown ? std::string("unknown master") : named.problem);
        failed.add_unclassified();
        continue;
      }
      ConnectionOptions master = master_options(options_, named.address->host, named.address->port);
      Connection probe(master);
      const std::array<std::string_view, 1> role{"ROLE"};
      const ReplyPtr answer = probe.command(role, "ROLE");
      if (!role_is_master(answer.get())) {
        tried += "; " + where + " named " + master.endpoint() + ", which is not a master (ROLE)";
        failed.add_unclassified();
        continue;
      }
      std::lock_guard lock(mutex_);
      preferred_ = index;
      return master;
    } catch (const Error& e) {  // the sentinel's or the master's
      unknown_everywhere = false;
      tried += "; " + where + ": " + e.what();
      failed.add(e);
    }
  }
  if (unknown_everywhere)
    throw ConnectError("Sentinel: no sentinel of " + options_.endpoint() + " knows master '" + options_.master_name +
                       "' (SENTINEL GET-MASTER-ADDR-BY-NAME answered nil)");
  // A wrong password (sentinels' or master's) everywhere is an AuthError here too.
  failed.throw_summary("Sentinel: cannot find master '" + options_.master_name + "'" + tried);
}

void SentinelTopology::mark_stale(const Node& node) noexcept {
  std::lock_guard lock(mutex_);
  if (master_.get() == &node) stale_.store(true, std::memory_order_release);
}

void SentinelTopology::report_error_reply(const Node& node, std::string_view text) noexcept {
  if (text.starts_with("READONLY")) mark_stale(node);
}

void SentinelTopology::report_io_failure(const Node& node) noexcept { mark_stale(node); }

void SentinelTopology::listen() {
  const auto sentinels = sentinels_of(options_);
  for (std::size_t round = 0;; ++round) {
    {
      std::lock_guard lock(stop_mutex_);
      if (stop_) return;
    }
    listen_once(sentinels[round % sentinels.size()]);
    std::unique_lock lock(stop_mutex_);
    if (stop_cv_.wait_for(lock, kListenRetry, [this] { return stop_; })) return;
  }
}

// One subscription to one sentinel, until it breaks or the topology stops.
bool SentinelTopology::listen_once(const NodeAddress& address) {
  try {
    Connection connection(sentinel_options(options_, address), ServerRole::sentinel);
    connection.ensure_connected();
    connection.complete_handshake();
    const std::array<std::string_view, 2> subscribe{"SUBSCRIBE", "+switch-master"};
    connection.append(subscribe);
    connection.flush("SUBSCRIBE +switch-master");
    while (true) {
      {
        std::lock_guard lock(stop_mutex_);
        if (stop_) return true;
      }
      if (!connection.has_buffered_input()) {
        pollfd p{connection.fd(), POLLIN, 0};
        const int ready = ::poll(&p, 1, 100);  // wakes to notice stop_
        if (ready < 0 && errno != EINTR) return false;
        if (ready <= 0) continue;
      }
      if (!connection.pump_input()) return false;
      while (true) {
        ReplyPtr reply;
        if (!connection.take_buffered_reply(reply)) return false;
        if (!reply) break;
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3) continue;
        if (text_of(*reply->element[0]) != "message") continue;
        // "<name> <old ip> <old port> <new ip> <new port>"
        const std::string_view payload = text_of(*reply->element[2]);
        const auto space = payload.find(' ');
        if (payload.substr(0, space) != options_.master_name) continue;
        urgent_.store(true);
        stale_.store(true, std::memory_order_release);
      }
    }
  } catch (...) {
    return false;
  }
}

}  // namespace lockon::detail
