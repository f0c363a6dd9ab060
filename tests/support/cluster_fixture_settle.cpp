// support/cluster_fixture_settle.cpp — RedisCluster::wait_settled (see
// cluster_fixture.hpp): the strong readiness check a new cluster passes before
// a test starts. Its own file so cluster_fixture.cpp stays readable.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/cluster_fixture.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One line of CLUSTER NODES.
struct NodeLine {
  std::string id;
  int port = 0;
  std::set<std::string> flags;
  std::string master;  // "-" for a master
  long long epoch = -1;
  std::string link;
  std::string slots;  // the rest of the line, as written
  std::string role() const {
    return flags.count("master") != 0 ? "master" : flags.count("slave") != 0 ? "replica" : "no role";
  }
};

std::string port_text(int port) { return std::to_string(port); }

// CLUSTER NODES of `server`, by port.
std::map<int, NodeLine> nodes_view(RawConnection& connection, int viewer) {
  const RawReply reply = connection.command({"CLUSTER", "NODES"});
  if (reply.is_error()) throw std::runtime_error("CLUSTER NODES on " + port_text(viewer) + ": " + reply.str);
  std::map<int, NodeLine> view;
  std::istringstream lines(reply.str);
  for (std::string text; std::getline(lines, text);) {
    std::istringstream words(text);
    NodeLine line;
    std::string address, flags;
    if (!(words >> line.id >> address >> flags >> line.master)) continue;
    std::string ping, pong;
    words >> ping >> pong >> line.epoch >> line.link;
    for (std::string slot; words >> slot;) line.slots += (line.slots.empty() ? "" : " ") + slot;
    const auto colon = address.find(':'), at = address.find('@');
    if (colon == std::string::npos || at == std::string::npos || at <= colon) continue;
    line.port = std::stoi(address.substr(colon + 1, at - colon - 1));
    std::istringstream flag_words(flags);
    for (std::string flag; std::getline(flag_words, flag, ',');) line.flags.insert(flag);
    view[line.port] = line;
  }
  return view;
}

// "name:value" lines (INFO, CLUSTER INFO) as a map.
std::map<std::string, std::string> fields(const RawReply& reply) {
  std::map<std::string, std::string> result;
  std::istringstream lines(reply.str);
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
    const auto colon = line.find(':');
    if (colon != std::string::npos) result[line.substr(0, colon)] = line.substr(colon + 1);
  }
  return result;
}

std::string get(const std::map<std::string, std::string>& map, const std::string& key) {
  const auto it = map.find(key);
  return it == map.end() ? std::string("(none)") : it->second;
}

}  // namespace

// Every problem found in one round, each naming the node that disagrees and
// about what; empty when the cluster is settled.
std::vector<std::string> RedisCluster::settle_problems() const {
  std::vector<std::string> problems;
  std::vector<RedisServer*> running;
  for (const auto& node : nodes_)
    if (node->running()) running.push_back(node.get());
  const bool all_running = running.size() == nodes_.size();

  std::map<int, RawConnection> connections;
  std::map<int, std::map<int, NodeLine>> views;  // viewer port -> its CLUSTER NODES
  std::map<int, NodeLine> self;                  // port -> the node's own line
  for (RedisServer* server : running) {
    const int port = server->port();
    try {
      connections.emplace(port, server->connect());
      views[port] = nodes_view(connections.at(port), port);
    } catch (const std::exception& e) {
      problems.push_back("node " + port_text(port) + " did not answer: " + e.what());
      return problems;
    }
    const auto mine = views[port].find(port);
    if (mine == views[port].end() || mine->second.flags.count("myself") == 0) {
      problems.push_back("node " + port_text(port) + " has no 'myself' line in CLUSTER NODES");
      return problems;
    }
    self[port] = mine->second;
  }
  std::map<std::string, int> port_of_id;
  for (const auto& [port, line] : self) port_of_id[line.id] = port;

  for (RedisServer* viewer : running) {
    const int v = viewer->port();
    const auto info = fields(connections.at(v).command({"CLUSTER", "INFO"}));
    for (const auto& [key, want] : std::map<std::string, std::string>{
             {"cluster_state", "ok"},
             {"cluster_slots_assigned", "16384"},
             {"cluster_slots_ok", "16384"},
             {"cluster_slots_pfail", "0"},
             {"cluster_slots_fail", "0"},
             {"cluster_known_nodes", std::to_string(nodes_.size())}})
      if (get(info, key) != want)
        problems.push_back("node " + port_text(v) + " says " + key + ":" + get(info, key) + " (want " + want + ")");
    for (RedisServer* target : running) {
      const int t = target->port();
      const NodeLine& own = self.at(t);
      const auto it = views[v].find(t);
      if (it == views[v].end()) {
        problems.push_back("node " + port_text(v) + " does not know node " + port_text(t));
        continue;
      }
      const NodeLine& seen = it->second;
      const std::string about = "node " + port_text(v) + " sees node " + port_text(t);
      if (seen.id != own.id) problems.push_back(about + " with id " + seen.id + ", it says " + own.id);
      for (const char* bad : {"fail", "fail?", "handshake", "noaddr"})
        if (seen.flags.count(bad) != 0) problems.push_back(about + " flagged " + bad);
      if (v != t && seen.link != "connected") problems.push_back(about + " with link " + seen.link);
      if (seen.role() != own.role()) problems.push_back(about + " as " + seen.role() + ", it is " + own.role());
      if (seen.master != own.master) problems.push_back(about + " replicating " + seen.master + ", it says " + own.master);
      if (seen.epoch != own.epoch)
        problems.push_back(about + " at config epoch " + std::to_string(seen.epoch) + ", it says " +
                           std::to_string(own.epoch));
      if (own.role() == "master" && seen.slots != own.slots)
        problems.push_back(about + " serving [" + seen.slots + "], it says [" + own.slots + "]");
      // No node may hold a failure report against a running node.
      const RawReply reports = connections.at(v).command({"CLUSTER", "COUNT-FAILURE-REPORTS", own.id});
      if (reports.integer != 0) problems.push_back(about + " with " + reports.to_string() + " failure reports");
    }
  }

  std::map<long long, int> epochs;  // masters' config epochs must be distinct
  std::map<int, int> replicas_of;   // master port -> replicas attached
  for (RedisServer* server : running) {
    const int port = server->port();
    const NodeLine& own = self.at(port);
    if (own.role() == "master") {
      if (own.slots.empty()) problems.push_back("master " + port_text(port) + " serves no slots");
      if (const auto [it, fresh] = epochs.emplace(own.epoch, port); !fresh)
        problems.push_back("masters " + port_text(it->second) + " and " + port_text(port) + " share config epoch " +
                           std::to_string(own.epoch));
      replicas_of.try_emplace(port, 0);
      continue;
    }
    if (own.role() != "replica") {
      problems.push_back("node " + port_text(port) + " has no role: " + own.role());
      continue;
    }
    // A replica is ready when its link is up with no sync under way, and its
    // master lists it as online (the master's side of the same link).
    const auto master_port = port_of_id.find(own.master);
    if (master_port == port_of_id.end()) {
      problems.push_back("replica " + port_text(port) + " replicates " + own.master + ", not a running node");
      continue;
    }
    ++replicas_of[master_port->second];
    const auto mine = fields(connections.at(port).command({"INFO", "replication"}));
    if (get(mine, "master_link_status") != "up" || get(mine, "master_sync_in_progress") != "0" ||
        get(mine, "master_port") != port_text(master_port->second))
      problems.push_back("replica " + port_text(port) + ": master_port " + get(mine, "master_port") +
                         ", master_link_status " + get(mine, "master_link_status") + ", master_sync_in_progress " +
                         get(mine, "master_sync_in_progress") + " (its master is " + port_text(master_port->second) + ")");
    const auto theirs = fields(connections.at(master_port->second).command({"INFO", "replication"}));
    bool online = false;
    for (const auto& [key, value] : theirs)
      if (key.rfind("slave", 0) == 0 && value.find(",port=" + port_text(port) + ",state=online,") != std::string::npos)
        online = true;
    if (!online)
      problems.push_back("master " + port_text(master_port->second) + " does not list replica " + port_text(port) +
                         " as online");
  }
  // Shape checks hold only for the cluster as built (a test may kill a node).
  if (all_running) {
    if (static_cast<int>(epochs.size()) != masters_)
      problems.push_back(std::to_string(epochs.size()) + " masters, want " + std::to_string(masters_));
    for (const auto& [port, count] : replicas_of)
      if (count != replicas_)
        problems.push_back("master " + port_text(port) + " has " + std::to_string(count) + " replicas, want " +
                           std::to_string(replicas_));
  }
  return problems;
}

void RedisCluster::wait_settled(std::chrono::milliseconds timeout, int confirmations) const {
  // By default settled twice in a row, 100 ms apart: a state seen once may
  // be a moment between two gossip updates.
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::vector<std::string> problems;
  int settled_rounds = 0;
  for (int round = 0; round < 10'000 && Clock::now() < deadline; ++round) {
    try {
      problems = settle_problems();
    } catch (const std::exception& e) {
      problems = {e.what()};
    }
    settled_rounds = problems.empty() ? settled_rounds + 1 : 0;
    if (settled_rounds >= confirmations) return;
    std::this_thread::sleep_for(problems.empty() ? 100ms : 20ms);
  }
  std::string text;
  for (std::size_t i = 0; i < problems.size() && i < 12; ++i) text += "\n  " + problems[i];
  if (problems.size() > 12) text += "\n  ... and " + std::to_string(problems.size() - 12) + " more";
  throw std::runtime_error("cluster not settled after " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()) +
                           " ms:" + text);
}

}  // namespace lockon::test
