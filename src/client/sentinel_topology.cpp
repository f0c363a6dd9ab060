#include "client/sentinel_topology.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <utility>

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

ConnectionOptions candidate_probe_options(const ConnectionOptions& base, const NodeAddress& candidate) {
  ConnectionOptions out = master_options(base, candidate.host, candidate.port);
  constexpr auto kProbeBound = std::chrono::milliseconds(250);
  for (auto* timeout : {&out.connect_timeout, &out.socket_timeout})
    if (timeout->count() <= 0 || *timeout > kProbeBound) *timeout = kProbeBound;
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
  const std::size_t sentinels = sentinels_of(options_).size();
  listeners_.reserve(sentinels);
  for (std::size_t i = 0; i < sentinels; ++i) listeners_.emplace_back([this, i] { listen(i); });
}

SentinelTopology::~SentinelTopology() {
  // A resolution still running uses this object: it ends within its budget.
  if (resolution_.valid()) resolution_.wait();
  {
    std::lock_guard lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  for (std::thread& listener : listeners_)
    if (listener.joinable()) listener.join();
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
  std::uint64_t news_before;
  {
    std::lock_guard lock(mutex_);
    news_before = news_;
  }
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
  // News that came while the sentinels were asked may be newer than their
  // answer: it leaves the topology stale for the next caller.
  if (news_ == news_before) stale_.store(false, std::memory_order_release);
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
  if (const std::optional<NodeAddress> hint = take_hint()) {
    // Failover news named it: no sentinel's answer can be newer. Its
    // failure decides nothing (the sentinels are asked next, the news's
    // sender first), so it is only listed.
    ConnectionOptions master = master_options(options_, hint->host, hint->port);
    try {
      Connection probe(master);
      const std::array<std::string_view, 1> role{"ROLE"};
      if (role_is_master(probe.command(role, "ROLE").get())) return master;
      tried += "; failover news named " + master.endpoint() + ", which is not a master (ROLE)";
    } catch (const Error& e) {
      tried += "; failover news named " + master.endpoint() + ": " + e.what();
    }
  }
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

std::optional<NodeAddress> SentinelTopology::take_hint() {
  std::lock_guard lock(mutex_);
  return std::exchange(hint_, std::nullopt);
}

void SentinelTopology::on_news(std::size_t sentinel, const SentinelNews& news) noexcept {
  std::lock_guard lock(mutex_);
  if (master_ && !stale_.load() && news_names(news, master_->options())) return;
  if (news.new_master) hint_ = news.new_master;
  ++news_;
  preferred_ = sentinel;  // it knows the new master
  urgent_.store(true);
  stale_.store(true, std::memory_order_release);
}

void SentinelTopology::listen(std::size_t sentinel) {
  while (true) {
    {
      std::lock_guard lock(stop_mutex_);
      if (stop_) return;
    }
    listen_once(sentinel);
    std::unique_lock lock(stop_mutex_);
    if (stop_cv_.wait_for(lock, kListenRetry, [this] { return stop_; })) return;
  }
}

// One subscription to one sentinel, until it breaks or the topology stops.
// While a replica is being promoted (news.candidate) the loop also probes
// its ROLE every kCandidateProbeEvery, for at most kCandidateWatchFor.
bool SentinelTopology::listen_once(std::size_t sentinel) {
  try {
    Connection connection(sentinel_options(options_, sentinels_of(options_).at(sentinel)), ServerRole::sentinel);
    connection.ensure_connected();
    connection.complete_handshake();
    connection.append(kSentinelSubscribe);
    connection.flush("SUBSCRIBE (sentinel failover events)");
    std::optional<NodeAddress> candidate;
    std::unique_ptr<Connection> probe;
    Clock::time_point watch_until{}, next_probe{};
    while (true) {
      {
        std::lock_guard lock(stop_mutex_);
        if (stop_) return true;
      }
      if (!connection.has_buffered_input()) {
        auto wait = std::chrono::milliseconds(100);  // wakes to notice stop_
        if (candidate)
          wait = std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(next_probe - Clock::now()),
                            std::chrono::milliseconds(0), wait);
        pollfd p{connection.fd(), POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
        if (ready < 0 && errno != EINTR) return false;
        if (ready > 0 && !connection.pump_input()) return false;
      } else if (!connection.pump_input()) {
        return false;
      }
      while (true) {
        ReplyPtr reply;
        if (!connection.take_buffered_reply(reply)) return false;
        if (!reply) break;
        const auto news = read_sentinel_news(*reply, options_.master_name);
        if (!news) continue;
        if (news->candidate) {
          candidate = news->candidate;
          probe.reset();
          watch_until = Clock::now() + kCandidateWatchFor;
          next_probe = Clock::now();
          continue;
        }
        if (news->new_master) candidate.reset();
        on_news(sentinel, *news);
      }
      if (candidate && Clock::now() >= next_probe) {
        if (Clock::now() >= watch_until) {
          candidate.reset();
        } else if (probe_says_master(*candidate, probe)) {
          on_news(sentinel, SentinelNews{candidate, std::nullopt});
          candidate.reset();
        } else {
          next_probe = Clock::now() + kCandidateProbeEvery;
        }
      }
    }
  } catch (...) {
    return false;
  }
}

// ROLE of the replica being promoted, over `link` (made on first use, reset
// after an error).
bool SentinelTopology::probe_says_master(const NodeAddress& candidate, std::unique_ptr<Connection>& link) noexcept {
  try {
    if (!link) link = std::make_unique<Connection>(candidate_probe_options(options_, candidate));
    const std::array<std::string_view, 1> role{"ROLE"};
    return role_is_master(link->command(role, "ROLE").get());
  } catch (...) {
    link.reset();
    return false;
  }
}

}  // namespace lockon::detail
