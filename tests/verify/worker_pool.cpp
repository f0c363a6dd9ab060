// verify/worker_pool.cpp — spawning, killing and reaping worker processes.
#include "worker_pool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <stdexcept>

#include "history.hpp"
#include "support/process.hpp"

namespace lockon::verify {

WorkerPool::WorkerPool(ClusterConfig config, TopologyArgs topology_args)
    : config_(std::move(config)), topology_args_(std::move(topology_args)) {}

WorkerPool::~WorkerPool() {
  for (auto& worker : workers_) {
    if (worker.pid > 0) {
      ::kill(worker.pid, SIGKILL);
      test::wait_for_exit(worker.pid, std::chrono::seconds(2));
    }
  }
}

void WorkerPool::start() {
  for (int id = 0; id < config_.workers; ++id) {
    workers_.push_back(Worker{.id = id});
    spawn(workers_.back());
  }
}

std::string WorkerPool::name(int id) const {
  const Worker& worker = workers_.at(static_cast<std::size_t>(id));
  return "w" + std::to_string(worker.id) + "." + std::to_string(worker.incarnation);
}

void WorkerPool::spawn(Worker& worker) {
  const std::string name = "w" + std::to_string(worker.id) + "." + std::to_string(worker.incarnation);
  std::vector<std::string> argv{
      config_.self, "worker", "--id", name, "--log", (config_.dir / ("worker-" + name + ".log")).string(),
      "--threads", std::to_string(config_.threads), "--keys", std::to_string(config_.keys),
      "--ttl", std::to_string(config_.ttl.count()), "--deadline", std::to_string(config_.deadline.count()),
      "--until", std::to_string(config_.until_ns), "--hold-us", std::to_string(config_.hold.count()),
      "--long-hold-every", std::to_string(config_.long_hold_every),
      "--seed", std::to_string(config_.seed * 1000 + static_cast<std::uint64_t>(worker.id * 100 + worker.incarnation))};
  for (auto& arg : topology_args_(worker.id)) argv.push_back(std::move(arg));
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

void WorkerPool::kill_and_restart(int id) {
  Worker& worker = workers_.at(static_cast<std::size_t>(id));
  ::kill(worker.pid, SIGKILL);
  test::wait_for_exit(worker.pid, std::chrono::seconds(5));
  ++worker.incarnation;
  spawn(worker);
}

int WorkerPool::restart_crashed() {
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

std::vector<std::string> WorkerPool::finish(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> hung;
  for (auto& worker : workers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!test::wait_for_exit(worker.pid, std::max(left, std::chrono::milliseconds(0)))) {
      hung.push_back(name(worker.id));
      ::kill(worker.pid, SIGKILL);
      test::wait_for_exit(worker.pid, std::chrono::seconds(5));
    }
    worker.pid = -1;
  }
  return hung;
}

}  // namespace lockon::verify
