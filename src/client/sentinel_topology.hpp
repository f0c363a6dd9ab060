// Sentinel: the master of one monitored set, found through the sentinels.
//
// Resolution: each sentinel in turn (the URL's order, the last one that
// answered first) is asked `SENTINEL GET-MASTER-ADDR-BY-NAME <name>`; the
// address it gives is connected to and must answer `ROLE` with "master" (a
// sentinel that has not seen a failover yet can name a demoted master).
// Sentinels are contacted with the sentinel credentials and db 0, the master
// with the URL's credentials and db; TLS settings apply to both. Each step is
// bounded by the connect / socket timeouts, the whole resolution by
// kResolveBudget.
//
// Following failovers: the master's Node is replaced when
//   - a caller reports READONLY from it (it was demoted) or an I/O failure
//     (it died): the topology is marked stale and the next node_for()
//     resolves again (at most one resolution at a time, at most one every
//     kResolveEvery: a dead master costs callers a ConnectError, not a storm
//     of resolutions);
//   - any sentinel of the URL publishes news of a failover of our master
//     (sentinel_events.hpp: +promoted-slave, +failover-state-reconf-slaves,
//     +switch-master): one background thread per sentinel, each subscribed
//     to its sentinel, marks the topology stale at once, with no throttle,
//     and notes the new master the news names (probed first, ROLE master)
//     and the sentinel that sent it (asked first). Listening on one
//     sentinel only left clients on the old master for the 4–6 s the
//     failover's leader waits before it publishes +switch-master. When the
//     leader says which replica it is promoting, that sentinel's thread
//     probes the replica's ROLE until it says master, and that is news
//     too. Each thread reconnects to its sentinel at most every
//     kListenRetry and ends with the topology.
// The retired Node lives on while callers hold it (their exchange finishes
// or fails on the old server); a waiter watching its subscriber keeps
// polling the lock with its attempts, which route to the new master.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/sentinel_events.hpp"
#include "client/sentinel_resolution.hpp"
#include "client/topology.hpp"

namespace lockon::detail {

class Connection;

class SentinelTopology final : public Topology {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kResolveEvery = std::chrono::milliseconds(100);
  static constexpr auto kListenRetry = std::chrono::milliseconds(250);

  /// Does not contact anything: the first node_for() resolves.
  SentinelTopology(ConnectionOptions options, PoolOptions limits);
  ~SentinelTopology() override;

  std::shared_ptr<Node> node_for(std::string_view key) override;
  std::shared_ptr<Node> node_for(std::string_view key, Clock::time_point until) override;
  std::shared_ptr<Node> any_node() override { return current(); }
  void report_error_reply(const Node& node, std::string_view text) noexcept override;
  void report_io_failure(const Node& node) noexcept override;

  /// Number of master switches seen (tests, diagnostics).
  std::uint64_t switches() const noexcept { return switches_.load(); }

 private:
  // Null when `until` passed while a resolution ran (it goes on).
  std::shared_ptr<Node> current(Clock::time_point until = Clock::time_point::max());
  // The resolution's thread: resolve(), then master_ and the throttle.
  void resolve_and_apply();
  // Asks the sentinels; returns the confirmed master's options. Throws
  // ConnectError naming the master and what each sentinel said.
  ConnectionOptions resolve();
  void mark_stale(const Node& node) noexcept;
  void listen(std::size_t sentinel);  // a failover-news thread
  bool listen_once(std::size_t sentinel);
  void on_news(std::size_t sentinel, const SentinelNews& news) noexcept;
  bool probe_says_master(const NodeAddress& candidate, std::unique_ptr<Connection>& link) noexcept;
  // The master named by the latest news, if any: probed first.
  std::optional<NodeAddress> take_hint();

  ConnectionOptions options_;
  PoolOptions limits_;
  std::shared_future<void> resolution_;  // the one resolution at a time (guarded by mutex_)
  std::mutex mutex_;          // guards master_, last_resolve_, preferred_, hint_, news_
  std::shared_ptr<Node> master_;
  Clock::time_point last_resolve_{};
  std::size_t preferred_ = 0;  // the sentinel that answered last, or sent the latest news
  std::optional<NodeAddress> hint_;  // the new master the latest news named
  std::uint64_t news_ = 0;           // failover news heard (a resolution started before is stale)
  std::atomic<bool> stale_{true};
  std::atomic<bool> urgent_{false};  // failover news: skip the throttle
  std::atomic<std::uint64_t> switches_{0};

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::vector<std::thread> listeners_;  // one per sentinel
};

}  // namespace lockon::detail
