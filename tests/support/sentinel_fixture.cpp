#include "support/sentinel_fixture.hpp"

#include <signal.h>

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"

namespace lockon::test {

namespace {

using Clock = std::chrono::steady_clock;

std::string tail(const std::filesystem::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

RawReply ask(int port, const std::vector<std::string>& args) {
  RawConnection c("127.0.0.1", port, RawConnectOptions{.connect_timeout = std::chrono::milliseconds(300),
                                                         .command_timeout = std::chrono::milliseconds(1000)});
  return c.command(args);
}

}  // namespace

SentinelSet::SentinelSet(SentinelSetOptions options) : failover_timeout_(options.failover_timeout) {
  if (options.replicas < 1) throw std::invalid_argument("SentinelSet: at least one replica");
  // No 5 s delay before a replica's (diskless) sync from the master (the
  // replicas' own delay is SentinelSetOptions::replica_sync_delay).
  const std::vector<std::string> fast_sync{"--repl-diskless-sync-delay", "0"};
  servers_.push_back(std::make_unique<RedisServer>(ServerOptions{.extra_args = fast_sync}));
  const std::string master_port = std::to_string(servers_[0]->port());
  const std::string replica_delay = std::to_string(options.replica_sync_delay.count());
  for (std::size_t i = 0; i < options.replicas; ++i)
    servers_.push_back(std::make_unique<RedisServer>(ServerOptions{
        .extra_args = {"--replicaof", "127.0.0.1", master_port, "--repl-diskless-sync-delay", replica_delay}}));
  // The replicas must be in sync before sentinels can promote them.
  const auto synced_by = Clock::now() + std::chrono::seconds(10);
  for (std::size_t i = 1; i < servers_.size(); ++i) {
    while (true) {
      const RawReply info = servers_[i]->command({"INFO", "replication"});
      if (info.str.find("master_link_status:up") != std::string::npos) break;
      if (Clock::now() > synced_by) throw std::runtime_error("replica did not sync: " + servers_[i]->log_tail());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (options.replica_announced_port) {
    const int announced = options.replica_announced_port(*servers_[1]);
    if (announced != 0) announce_replica_at(announced);
  }
  sentinels_.resize(3);
  for (Sentinel& sentinel : sentinels_) start_sentinel(sentinel);
  if (!wait_for_replicas(options.replicas, std::chrono::seconds(15)))
    throw std::runtime_error("sentinels did not discover the replica / each other:\n" + logs());
}

// The replica announces itself at `port` from its next handshake with the
// master (REPLCONF listening-port), which dropping its master link forces;
// done when the master lists it there, link up (the sentinels, started
// after, learn the replica from the master's INFO).
void SentinelSet::announce_replica_at(int port) {
  RedisServer& replica = *servers_[1];
  replica.command({"CONFIG", "SET", "replica-announce-ip", "127.0.0.1"});
  replica.command({"CONFIG", "SET", "replica-announce-port", std::to_string(port)});
  replica.command({"CLIENT", "KILL", "TYPE", "master"});
  const std::string listed = "port=" + std::to_string(port) + ",";
  const auto by = Clock::now() + std::chrono::seconds(10);
  while (true) {
    const RawReply master = servers_[0]->command({"INFO", "replication"});
    const RawReply info = replica.command({"INFO", "replication"});
    if (master.str.find(listed) != std::string::npos && info.str.find("master_link_status:up") != std::string::npos)
      return;
    if (Clock::now() > by)
      throw std::runtime_error("the replica is not listed at port " + std::to_string(port) + ":\n" + master.str);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

SentinelSet::~SentinelSet() {
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    kill_sentinel(i);
    std::error_code ignored;
    std::filesystem::remove_all(sentinels_[i].dir, ignored);
  }
}

void SentinelSet::start_sentinel(Sentinel& sentinel) {
  sentinel.port = reserve_free_port();
  sentinel.dir = make_temp_dir("lockon-sentinel-");
  const auto conf = sentinel.dir / "sentinel.conf";
  {
    std::ofstream out(conf);
    out << "port " << sentinel.port << "\n"
        << "bind 127.0.0.1\n"
        << "dir " << sentinel.dir.string() << "\n"
        << "logfile " << (sentinel.dir / "sentinel.log").string() << "\n"
        << "sentinel resolve-hostnames no\n"
        << "sentinel monitor " << kMasterName << " 127.0.0.1 " << servers_[0]->port() << " 2\n"
        << "sentinel down-after-milliseconds " << kMasterName << " 1000\n"
        << "sentinel failover-timeout " << kMasterName << " " << failover_timeout_.count() << "\n"
        << "sentinel parallel-syncs " << kMasterName << " 1\n";
  }
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  sentinel.pid = spawn_raw({"redis-server", conf.string(), "--sentinel"}, {}, devnull, devnull);
  ::close(devnull);
  const auto ready_by = Clock::now() + std::chrono::seconds(5);
  while (true) {
    try {
      if (ask(sentinel.port, {"PING"}).is("PONG")) return;
    } catch (...) {
    }
    if (Clock::now() > ready_by)
      throw std::runtime_error("sentinel on port " + std::to_string(sentinel.port) + " did not start:\n" +
                               tail(sentinel.dir / "sentinel.log", 30));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void SentinelSet::kill_sentinel(std::size_t i) {
  Sentinel& sentinel = sentinels_.at(i);
  if (sentinel.pid <= 0) return;
  ::kill(sentinel.pid, SIGKILL);
  wait_for_exit(sentinel.pid, std::chrono::seconds(5));
  sentinel.pid = -1;
  release_free_port(sentinel.port);
}

RedisServer& SentinelSet::server_on(int port) {
  for (auto& server : servers_)
    if (server->port() == port) return *server;
  throw std::runtime_error("no data server on port " + std::to_string(port));
}

std::string SentinelSet::url(const std::string& query) const {
  std::string out = "redis-sentinel://";
  for (std::size_t i = 0; i < sentinels_.size(); ++i)
    out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels_[i].port);
  return out + query + "#" + kMasterName;
}

std::string SentinelSet::url_in_order(const std::vector<std::size_t>& order, const std::string& query) const {
  std::string out = "redis-sentinel://";
  for (std::size_t i = 0; i < order.size(); ++i)
    out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels_.at(order[i]).port);
  return out + query + "#" + kMasterName;
}

RawReply SentinelSet::sentinel_command_at(std::size_t i, const std::vector<std::string>& args) {
  return ask(sentinels_.at(i).port, args);
}

RawReply SentinelSet::sentinel_command(const std::vector<std::string>& args) {
  std::string errors;
  for (const Sentinel& sentinel : sentinels_) {
    if (sentinel.pid <= 0) continue;
    try {
      return ask(sentinel.port, args);
    } catch (const std::exception& e) {
      errors += std::string(e.what()) + "; ";
    }
  }
  throw std::runtime_error("no sentinel answered: " + errors);
}

int SentinelSet::master_port_by_sentinel() {
  try {
    const RawReply reply = sentinel_command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", kMasterName});
    if (reply.elements.size() == 2) return std::stoi(reply.elements[1].str);
  } catch (...) {
  }
  return 0;
}

int SentinelSet::wait_for_new_master(int old_port, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    int agreed = 0;
    bool all = true;
    for (const Sentinel& sentinel : sentinels_) {
      if (sentinel.pid <= 0) continue;
      try {
        const RawReply r = ask(sentinel.port, {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", kMasterName});
        const int port = r.elements.size() == 2 ? std::stoi(r.elements[1].str) : 0;
        if (port == 0 || port == old_port || (agreed != 0 && port != agreed)) all = false;
        agreed = port;
      } catch (...) {
        all = false;
      }
    }
    if (all && agreed != 0) {
      try {
        const RawReply role = ask(agreed, {"ROLE"});
        if (!role.elements.empty() && role.elements[0].str == "master") return agreed;
      } catch (...) {
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

bool SentinelSet::wait_for_replicas(std::size_t replicas, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    bool all = true;
    for (const Sentinel& sentinel : sentinels_) {
      if (sentinel.pid <= 0) continue;
      try {
        const RawReply r = ask(sentinel.port, {"SENTINEL", "REPLICAS", kMasterName});
        const RawReply s = ask(sentinel.port, {"SENTINEL", "SENTINELS", kMasterName});
        if (r.elements.size() < replicas || s.elements.size() + 1 < sentinels_.size()) all = false;
      } catch (...) {
        all = false;
      }
    }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string SentinelSet::logs() const {
  std::string out;
  for (const Sentinel& sentinel : sentinels_)
    out += "--- sentinel " + std::to_string(sentinel.port) + "\n" + tail(sentinel.dir / "sentinel.log", 15);
  for (const auto& server : servers_) out += "--- server " + std::to_string(server->port()) + "\n" + server->log_tail(10);
  return out;
}

void SentinelSet::restart_as_replica_of(std::size_t i, int master_port) {
  RedisServer& server = *servers_.at(i);
  server.restart();
  const RawReply reply = server.command({"REPLICAOF", "127.0.0.1", std::to_string(master_port)});
  // "OK", or "OK Already connected to specified master" for a replica
  // whose --replicaof names that master already.
  if (reply.is_error()) throw std::runtime_error("REPLICAOF after restart: " + reply.to_string());
}

}  // namespace lockon::test
