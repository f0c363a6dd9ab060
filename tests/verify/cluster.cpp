// verify/cluster.cpp — servers, proxies and worker processes of the harness.
#include "cluster.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <stdexcept>

#include "history.hpp"
#include "support/process.hpp"

namespace lockon::verify {

Cluster::Cluster(ClusterConfig config) : config_(std::move(config)) {
  resource_ = std::make_unique<test::RedisServer>();
  lock_ = std::make_unique<test::RedisServer>(
      test::ServerOptions{.extra_args = {"--appendonly", "yes", "--appendfsync", "always"}});
  nodes_ = test::start_servers(3);
  proxy_thread_ = test::FaultProxy::make_thread();
  lock_proxy_ = std::make_unique<test::FaultProxy>(lock_->host(), lock_->port(), proxy_thread_);
  for (const auto& node : nodes_)
    node_proxies_.push_back(std::make_unique<test::FaultProxy>(node->host(), node->port(), proxy_thread_));
}

Cluster::~Cluster() {
  for (auto& worker : workers_) {
    if (worker.pid > 0) {
      ::kill(worker.pid, SIGKILL);
      test::wait_for_exit(worker.pid, std::chrono::seconds(2));
    }
  }
}

void Cluster::start_workers() {
  for (int id = 0; id < config_.workers; ++id) {
    workers_.push_back(Worker{.id = id});
    spawn(workers_.back());
  }
}

std::string Cluster::worker_name(int id) const {
  const Worker& worker = workers_.at(static_cast<std::size_t>(id));
  return "w" + std::to_string(worker.id) + "." + std::to_string(worker.incarnation);
}

void Cluster::spawn(Worker& worker) {
  std::string nodes;
  for (const auto& proxy : node_proxies_) nodes += (nodes.empty() ? "" : ",") + proxy->url();
  const std::string name = "w" + std::to_string(worker.id) + "." + std::to_string(worker.incarnation);
  const std::vector<std::string> argv{
      config_.self, "worker", "--id", name, "--log", (config_.dir / ("worker-" + name + ".log")).string(),
      "--lock-url", lock_proxy_->url(), "--nodes", nodes, "--resource-url", resource_->url(),
      "--threads", std::to_string(config_.threads), "--keys", std::to_string(config_.keys),
      "--ttl", std::to_string(config_.ttl.count()), "--deadline", std::to_string(config_.deadline.count()),
      "--until", std::to_string(config_.until_ns), "--hold-us", std::to_string(config_.hold.count()),
      "--long-hold-every", std::to_string(config_.long_hold_every),
      "--seed", std::to_string(config_.seed * 1000 + static_cast<std::uint64_t>(worker.id * 100 + worker.incarnation))};
  const auto output = config_.dir / ("worker-" + name + ".out");
  const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + output.string());
  try {
    worker.pid = test::spawn_raw(argv, {}, fd, fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void Cluster::kill_and_restart_worker(int id) {
  Worker& worker = workers_.at(static_cast<std::size_t>(id));
  ::kill(worker.pid, SIGKILL);
  test::wait_for_exit(worker.pid, std::chrono::seconds(5));
  ++worker.incarnation;
  spawn(worker);
}

int Cluster::restart_crashed_workers() {
  int restarted = 0;
  // Workers end on their own at until_ns: only an earlier exit is a crash.
  if (now_ns() >= config_.until_ns) return 0;
  for (auto& worker : workers_) {
    const auto status = test::wait_for_exit(worker.pid, std::chrono::milliseconds(0));
    if (!status) continue;
    std::cerr << "worker w" << worker.id << "." << worker.incarnation << " ended early (status " << *status
              << "), restarting\n";
    ++worker.incarnation;
    spawn(worker);
    ++restarted;
  }
  return restarted;
}

std::vector<std::string> Cluster::finish_workers(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> hung;
  for (auto& worker : workers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!test::wait_for_exit(worker.pid, std::max(left, std::chrono::milliseconds(0)))) {
      hung.push_back(worker_name(worker.id));
      ::kill(worker.pid, SIGKILL);
      test::wait_for_exit(worker.pid, std::chrono::seconds(5));
    }
    worker.pid = -1;
  }
  return hung;
}

void Cluster::restart_lock_server(bool keep_data) {
  lock_->kill();
  if (!keep_data) {
    std::error_code ignored;
    std::filesystem::remove_all(lock_->dir() / "appendonlydir", ignored);
  }
  lock_->restart();
}

}  // namespace lockon::verify
