// A TCP relay on 127.0.0.1 that holds every chunk of bytes for a fixed time
// in each direction: servers on separate hosts, emulated on one machine.
//
// Why: N redis-servers started on this 2-core machine share its cores with
// the client, so a Redlock over 5 of them measures CPU contention, not the
// fan-out. Behind relays with a LAN-like delay, the network dominates as it
// does in production, and a parallel fan-out shows up as N = 5 costing about
// what N = 1 costs, while a sequential one would cost 5 times as much.
#pragma once

#include <chrono>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

namespace lockon::bench {

/// Relays for any number of servers, served by one thread: like a switch,
/// a request fanned out to five nodes is forwarded in one wake-up, so the
/// emulation adds no per-node scheduling delays of its own.
class DelayProxy {
 public:
  explicit DelayProxy(std::chrono::microseconds one_way);
  ~DelayProxy();
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  /// Listens on a free loopback port whose connections are relayed to
  /// target_host:target_port, each direction delayed by one_way. Returns
  /// that port. Thread-safe.
  int relay_to(const std::string& target_host, int target_port);

 private:
  struct Route {
    int listen_fd;
    std::string host;
    int port;
  };
  void run() noexcept;

  std::chrono::microseconds one_way_;
  int wake_fd_ = -1;
  std::mutex mutex_;
  std::vector<Route> routes_;  // guarded by mutex_; the thread copies them
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace lockon::bench
