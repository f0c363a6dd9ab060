#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "bench_support.hpp"
#include "lockon/options.hpp"
#include "support/fault_proxy.hpp"
#include "support/redis_server.hpp"

namespace lockon::bench {
namespace {

struct Servers {
  std::mutex mutex;
  std::string external_url;
  std::vector<std::unique_ptr<test::RedisServer>> started;
  // One latency proxy per server and delay: (server index, delay in us) ->
  // its proxy. All served by one thread, like one switch in front of the
  // hosts: a fan-out to five nodes is forwarded in one wake-up. Destroyed
  // before the servers.
  std::shared_ptr<test::FaultProxy::Thread> proxy_thread;
  std::map<std::pair<std::size_t, long long>, std::unique_ptr<test::FaultProxy>> proxies;
};

Servers& servers() {
  static Servers instance;
  return instance;
}

std::vector<RatioSpec>& ratio_registry() {
  static std::vector<RatioSpec> specs;
  return specs;
}

}  // namespace

void set_external_url(std::string url) { servers().external_url = std::move(url); }

void stop_servers() {
  std::lock_guard lock(servers().mutex);
  servers().proxies.clear();
  servers().proxy_thread.reset();
  servers().started.clear();
}

const std::string& server_url() {
  static const std::string url = server_urls(1).front();
  return url;
}

std::vector<std::string> server_urls(std::size_t n) {
  Servers& s = servers();
  std::lock_guard lock(s.mutex);
  if (!s.external_url.empty()) {
    if (n != 1) throw std::runtime_error("this benchmark needs " + std::to_string(n) + " servers; run without --redis-url");
    return {s.external_url};
  }
  while (s.started.size() < n) s.started.push_back(std::make_unique<test::RedisServer>());
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < n; ++i) urls.push_back(s.started[i]->url());
  return urls;
}

std::vector<std::string> delayed_server_urls(std::size_t n, std::chrono::microseconds one_way) {
  const std::vector<std::string> direct = server_urls(n);
  Servers& s = servers();
  std::lock_guard lock(s.mutex);
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < n; ++i) {
    auto& proxy = s.proxies[{i, one_way.count()}];
    if (!proxy) {
      const auto options = ConnectionOptions::from_url(direct[i]);
      if (!s.proxy_thread) s.proxy_thread = test::FaultProxy::make_thread();
      proxy = std::make_unique<test::FaultProxy>(options.host, options.port, s.proxy_thread);
      proxy->set_latency(one_way);
    }
    urls.push_back(proxy->url());
  }
  return urls;
}

bool register_ratio(RatioSpec spec) {
  ratio_registry().push_back(std::move(spec));
  return true;
}

const std::vector<RatioSpec>& ratios() { return ratio_registry(); }

void run_alternating_blocks(benchmark::State& state, std::vector<CycleVariant>& variants, int rounds, int block) {
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    for (auto& v : variants) v.seconds = 0;
    for (int round = 0; round < rounds; ++round) {
      // Each round starts one variant later: none always runs right after
      // the same other (whose background work, caches or server state
      // could otherwise favour or burden it in every round).
      for (std::size_t k = 0; k < variants.size(); ++k) {
        auto& v = variants[(k + static_cast<std::size_t>(round)) % variants.size()];
        const auto start = Clock::now();
        for (int i = 0; i < block; ++i) v.cycle();
        v.seconds += std::chrono::duration<double>(Clock::now() - start).count();
      }
    }
  }
  const double baseline_seconds = variants.front().seconds;
  for (const auto& v : variants) {
    state.counters["us_per_cycle_" + v.name] = 1e6 * v.seconds / (static_cast<double>(rounds) * block);
    state.counters["ratio_" + v.name] = baseline_seconds / v.seconds;
  }
}

namespace {
constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
constexpr const char* kFloorToken = "0123456789abcdef0123456789abcdef";
}  // namespace

RawFloor::RawFloor(const std::string& url, std::string key) : context_(nullptr, &redisFree), key_(std::move(key)) {
  const auto options = ConnectionOptions::from_url(url);
  context_.reset(redisConnect(options.host.c_str(), options.port));
  if (!context_ || context_->err) throw std::runtime_error("cannot connect to " + url);
  auto* loaded = static_cast<redisReply*>(redisCommand(context_.get(), "SCRIPT LOAD %s", kCompareAndDelete));
  if (loaded == nullptr || loaded->type != REDIS_REPLY_STRING) throw std::runtime_error("SCRIPT LOAD failed");
  sha_.assign(loaded->str, loaded->len);
  freeReplyObject(loaded);
}

void RawFloor::cycle() {
  freeReplyObject(redisCommand(context_.get(), "SET %s %s NX PX 30000", key_.c_str(), kFloorToken));
  freeReplyObject(redisCommand(context_.get(), "EVALSHA %s 1 %s %s", sha_.c_str(), key_.c_str(), kFloorToken));
}

}  // namespace lockon::bench
