// integration/test_cluster_tls.cpp — `rediss-cluster://`: a 3-master cluster
// whose nodes speak TLS to clients and to each other (tls-cluster yes), made
// with redis-cli --tls --cluster create. Commands and locks route to every
// shard over TLS, and a hand-over's wake-up arrives by sharded pub/sub.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/tls_certs.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool cluster_ok(RedisServer& server) {
  const RawReply info = server.command({"CLUSTER", "INFO"});
  return info.str.find("cluster_state:ok") != std::string::npos;
}

TEST(ClusterTls, RedissClusterRoutesCommandsLocksAndWakeUpsOverTls) {
  // Own free ports for the cluster bus (port + 10000 may be taken).
  std::vector<int> bus_ports;
  struct Release {
    std::vector<int>& ports;
    ~Release() {
      for (const int port : ports) release_free_port(port);
    }
  } release{bus_ports};  // after the servers are gone (declared before them)
  std::vector<std::unique_ptr<TlsRedisServer>> nodes;
  for (int i = 0; i < 3; ++i) {
    bus_ports.push_back(reserve_free_port());
    const TlsServerOptions options{
        .base = {.extra_args = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                "--cluster-node-timeout", "2000", "--tls-cluster", "yes", "--tls-replication", "yes",
                                "--cluster-port", std::to_string(bus_ports.back())}}};
    nodes.push_back(std::make_unique<TlsRedisServer>(options));
  }
  std::vector<std::string> argv{"redis-cli", "--tls", "--cacert", tls_files().ca_cert, "--cluster", "create"};
  for (const auto& node : nodes) argv.push_back("127.0.0.1:" + std::to_string(node->tls_port()));
  argv.insert(argv.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  const ProcessResult created = run_process(argv, 60s);
  ASSERT_TRUE(created.succeeded()) << created.describe();
  const auto deadline = Clock::now() + 30s;
  while (!std::all_of(nodes.begin(), nodes.end(), [](auto& node) { return cluster_ok(node->server()); })) {
    ASSERT_LT(Clock::now(), deadline) << "TLS cluster never reached cluster_state:ok";
    std::this_thread::sleep_for(50ms);
  }
  std::string url = "rediss-cluster://";
  for (std::size_t i = 0; i < nodes.size(); ++i)
    url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes[i]->tls_port());
  url += "?cacert=" + tls_files().ca_cert;

  const Client client(url);
  const std::string prefix = unique_key("tls-route");
  for (int i = 0; i < 90; ++i) client.command({"SET", prefix + ":" + std::to_string(i), "v"});
  for (auto& node : nodes) EXPECT_GT(node->server().command({"DBSIZE"}).integer, 5) << "a shard got no keys";

  for (int n = 0; n < 3; ++n) {
    const std::string name = unique_key("tls-lock-" + std::to_string(n));
    Lock holder(client, name, {.ttl = 10s, .fencing = true});
    ASSERT_TRUE(holder.try_lock());
    std::atomic<long long> after_release{-1};
    std::atomic<long long> released_ns{0};
    std::thread waiter([&] {
      const Client mine(url);
      Lock lock(mine, name, {.ttl = 10s, .wait_poll_interval = 10s});
      if (lock.try_lock_for(8s)) {
        after_release = (Clock::now().time_since_epoch().count() - released_ns.load()) / 1'000'000;
        lock.unlock();
      }
    });
    std::this_thread::sleep_for(150ms);
    released_ns = Clock::now().time_since_epoch().count();
    holder.unlock();
    waiter.join();
    EXPECT_GE(after_release.load(), 0) << name;
    EXPECT_LT(after_release.load(), 1000) << "no wake-up over TLS for " << name;
  }
}

}  // namespace
}  // namespace lockon::test
