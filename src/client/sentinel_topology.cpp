#include "client/sentinel_topology.hpp"

#include <poll.h>

#include <algorithm>
#include <array>
#include <utility>

#include "client/connection.hpp"
#include "client/error_map.hpp"
#include "common/inline_task.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {

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

namespace {

// The blocking port of resolve_master: plain calls on short-lived
// connections whose timeouts bound each step (resolution_bounds).
struct BlockingResolutionPort {
  template <class T>
  using Task = InlineTask<T>;
  using Master = ConnectionOptions;

  static ReplyPtr ask(const ConnectionOptions& options, ServerRole role, std::span<const std::string_view> args,
                      std::string_view operation) {
    Connection connection(step_bounded(options), role);
    return connection.command(args, operation);
  }
  Task<ReplyPtr> ask_sentinel(const ConnectionOptions& sentinel, std::chrono::steady_clock::time_point) {
    const std::array<std::string_view, 3> question{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinel.master_name};
    co_return ask(sentinel, ServerRole::sentinel, question, "SENTINEL GET-MASTER-ADDR-BY-NAME");
  }
  Task<std::optional<Master>> master_if_role(const ConnectionOptions& master, std::chrono::steady_clock::time_point) {
    const std::array<std::string_view, 1> role{"ROLE"};
    const ReplyPtr answer = ask(master, ServerRole::data, role, "ROLE");
    co_return role_is_master(answer.get()) ? std::optional<Master>(master) : std::nullopt;
  }
};

}  // namespace

ConnectionOptions SentinelTopology::resolve() {
  std::size_t first;
  {
    std::lock_guard lock(mutex_);
    first = preferred_;
  }
  BlockingResolutionPort port;
  auto resolved = resolve_master(port, options_, first, take_hint()).get();
  if (resolved.sentinel) {
    std::lock_guard lock(mutex_);
    preferred_ = *resolved.sentinel;
  }
  return std::move(resolved.master);
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
