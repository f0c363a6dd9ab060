// verify/orchestrator.cpp — `lockon_verify run`: servers, workers, nemesis,
// final state, then the checker.
//
// Files in the run directory (the checker reads only these):
//   meta.txt          key=value lines: seed, ttl_ms, deadline_ms, seconds, ...
//   worker-*.log      CsRecord lines; worker-*.out the workers' own output
//   faults.log        FaultRecord lines
//   final.txt         "nottl <server> <key>", "hung <worker>", "injected <type> <n>"
//                     (faults.log also has the Sentinel topology's observed
//                     promotions and demotions, role_watcher.hpp)
//   resource.txt      "state <key> <field>=<value>..." and "write <key> <fence> <holder>"
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "cluster.hpp"
#include "cluster_nemesis.hpp"
#include "nemesis.hpp"
#include "role_watcher.hpp"
#include "sentinel_nemesis.hpp"
#include "support/process.hpp"
#include "verify.hpp"

namespace lockon::verify {

namespace {

// Every key of `server` (SCAN) whose PTTL is -1. Fence counters included:
// they expire (an hour after their creation), fences staying increasing
// through the server clock floor.
void find_keys_without_ttl(test::RedisServer& server, const std::string& name, std::ofstream& out) {
  test::RawConnection connection = server.connect();
  std::string cursor = "0";
  for (int round = 0; round < 100000; ++round) {
    const test::RawReply page = connection.command({"SCAN", cursor, "COUNT", "1000"});
    if (page.is_error() || page.elements.size() != 2) {
      out << "scan_failed " << name << ' ' << page.str << '\n';
      return;
    }
    for (const auto& key : page.elements[1].elements) {
      if (connection.command({"PTTL", key.str}).integer == -1) out << "nottl " << name << ' ' << key.str << '\n';
    }
    cursor = page.elements[0].str;
    if (cursor == "0") return;
  }
}

void dump_resource(test::RedisServer& resource, std::ofstream& out) {
  test::RawConnection connection = resource.connect();
  std::string cursor = "0";
  for (int round = 0; round < 100000; ++round) {
    const test::RawReply page = connection.command({"SCAN", cursor, "MATCH", "res:*", "COUNT", "1000"});
    for (const auto& entry : page.elements.at(1).elements) {
      const std::string& name = entry.str;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ":log") == 0) {
        const std::string key = name.substr(4, name.size() - 8);
        const test::RawReply writes = connection.command({"LRANGE", name, "0", "-1"});
        for (const auto& write : writes.elements) out << "write " << key << ' ' << write.str << '\n';
      } else {
        const test::RawReply fields = connection.command({"HGETALL", name});
        out << "state " << name.substr(4);
        for (std::size_t i = 0; i + 1 < fields.elements.size(); i += 2)
          out << ' ' << fields.elements[i].str << '=' << fields.elements[i + 1].str;
        out << '\n';
      }
    }
    cursor = page.elements.at(0).str;
    if (cursor == "0") return;
  }
}

void run_nemesis(Nemesis& nemesis, WorkerPool& workers, bool faults, std::chrono::steady_clock::time_point end) {
  if (faults) {
    nemesis.run_until(end);
    return;
  }
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    workers.restart_crashed();
  }
}

void write_final(std::ofstream& out, const std::vector<std::string>& hung, const std::map<std::string, int>& counts) {
  for (const auto& name : hung) out << "hung " << name << '\n';
  for (const auto& [type, count] : counts) out << "injected " << type << ' ' << count << '\n';
}

}  // namespace

int run_orchestrator(const Args& args, const std::string& self) {
  const std::uint64_t seed =
      args.has("seed") ? static_cast<std::uint64_t>(args.number("seed", 1)) : std::random_device{}() % 1000000;
  const long long seconds = args.number("seconds", 120);
  const bool faults = args.get("faults", "all") != "none";
  const std::string topology = args.get("topology", "standalone");
  if (topology != "standalone" && topology != "sentinel" && topology != "cluster")
    throw std::runtime_error("--topology: standalone, sentinel or cluster, not " + topology);
  const std::chrono::milliseconds failover_timeout(args.number("failover-timeout-ms", 5000));
  const std::chrono::milliseconds failover_window(args.number("failover-window-ms", 1000));
  const std::filesystem::path dir = args.has("dir") ? std::filesystem::path(args.get("dir")) : test::make_temp_dir("lockon-verify");
  std::filesystem::create_directories(dir);
  std::cout << "lockon_verify: seed " << seed << " (replay: --seed " << seed << "), " << seconds << " s, topology "
            << topology << ", faults " << (faults ? "all" : "none") << ", history in " << dir.string() << std::endl;

  ClusterConfig config{.dir = dir, .self = self};
  config.workers = static_cast<int>(args.number("workers", 4));
  config.threads = static_cast<int>(args.number("threads", 3));
  config.keys = static_cast<int>(args.number("keys", 8));
  config.ttl = std::chrono::milliseconds(args.number("ttl", 2000));
  config.deadline = std::chrono::milliseconds(args.number("deadline", 3000));
  config.hold = std::chrono::microseconds(args.number("hold-us", 1000));
  config.long_hold_every = static_cast<int>(args.number("long-hold-every", 40));
  config.seed = seed;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  config.until_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count();
  {
    std::ofstream meta(dir / "meta.txt");
    meta << "seed=" << seed << "\nseconds=" << seconds << "\nttl_ms=" << config.ttl.count()
         << "\ndeadline_ms=" << config.deadline.count() << "\nworkers=" << config.workers
         << "\nthreads=" << config.threads << "\nkeys=" << config.keys << "\nhold_us=" << config.hold.count()
         << "\nlong_hold_every=" << config.long_hold_every
         << "\nfaults=" << (faults ? "all" : "none") << "\ntopology=" << topology;
    if (topology == "sentinel")
      meta << "\nfailover_timeout_ms=" << failover_timeout.count() << "\nfailover_window_ms=" << failover_window.count();
    meta << '\n';
  }

  // Server directories on tmpfs when there is one: appendfsync always then
  // costs no disk flush (a flush stalled by other jobs on the machine would be
  // reported as a late error), and a killed redis-server still finds its AOF —
  // the harness restarts processes, it never crashes the machine.
  if (std::filesystem::is_directory("/dev/shm") && !args.has("keep-tmpdir")) ::setenv("TMPDIR", "/dev/shm", 1);
  LineLog fault_log((dir / "faults.log").string());
  // A section started just before `end` may wait its whole deadline, then
  // release: give that time, and one more deadline, before calling it hung.
  const auto finish_by = end + 2 * config.deadline + config.ttl + std::chrono::seconds(2);
  std::ofstream final_state(dir / "final.txt");
  std::ofstream resource(dir / "resource.txt");
  if (topology == "sentinel") {
    SentinelCluster cluster(config, failover_timeout);
    std::vector<int> sentinel_ports;
    for (std::size_t i = 0; i < cluster.sentinels().sentinel_count(); ++i)
      sentinel_ports.push_back(cluster.sentinels().sentinel_port(i));
    RoleWatcher roles(cluster.data_ports(), sentinel_ports, cluster.sentinels().master().port(), failover_window,
                      fault_log);
    cluster.workers().start();
    SentinelNemesis nemesis(cluster, roles, failover_timeout, seed, config.ttl, fault_log);
    run_nemesis(nemesis, cluster.workers(), faults, end);
    const auto hung = cluster.workers().finish(finish_by);
    write_final(final_state, hung, nemesis.counts());
    const int master = cluster.master_index();
    if (master >= 0) {
      test::RedisServer& server = cluster.sentinels().data_server(static_cast<std::size_t>(master));
      find_keys_without_ttl(server, "master:" + std::to_string(server.port()), final_state);
    } else {
      final_state << "scan_failed master no master at the end\n";
    }
    dump_resource(cluster.resource(), resource);
  } else if (topology == "cluster") {
    ClusterTopology cluster(config);
    cluster.workers().start();
    ClusterNemesis nemesis(cluster, seed, config.ttl, fault_log);
    run_nemesis(nemesis, cluster.workers(), faults, end);
    const auto hung = cluster.workers().finish(finish_by);
    write_final(final_state, hung, nemesis.counts());
    try {
      for (test::RedisServer* master : cluster.cluster().masters())
        find_keys_without_ttl(*master, "master:" + std::to_string(master->port()), final_state);
    } catch (const std::exception& e) {
      final_state << "scan_failed masters " << e.what() << '\n';
    }
    dump_resource(cluster.resource(), resource);
  } else {
    Cluster cluster(config);
    cluster.workers().start();
    StandaloneNemesis nemesis(cluster, seed, config.ttl, fault_log);
    run_nemesis(nemesis, cluster.workers(), faults, end);
    const auto hung = cluster.workers().finish(finish_by);
    write_final(final_state, hung, nemesis.counts());
    find_keys_without_ttl(cluster.lock_server(), "lock", final_state);
    for (std::size_t i = 0; i < cluster.node_count(); ++i)
      find_keys_without_ttl(cluster.node(i), "node" + std::to_string(i), final_state);
    dump_resource(cluster.resource(), resource);
  }
  final_state.close();
  resource.close();
  return run_check_dir(dir);
}

}  // namespace lockon::verify
