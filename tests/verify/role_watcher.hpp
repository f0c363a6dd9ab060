// verify/role_watcher.hpp — when did a replica become master? The Sentinel
// topology's reference clock for failovers: a thread asks every data server
// ROLE every 20 ms and logs, as FaultRecords in the faults log,
//   promotion  master:<new> [seen, seen + window] "old=<port>:new=<port>:window_ms=<W>"
//              a server that said slave now says master;
//   demotion   master:<port> [seen, seen]  a server that said master now says slave;
//              when that was the master last promoted and another server
//              still says master, a promotion of that one (detail
//              "...:reverted=1"): the failover was undone;
//   unnamed / named  master:<port> [seen, seen]  no sentinel names the port
//              as master any more (GET-MASTER-ADDR-BY-NAME, asked of every
//              sentinel each round) / one does again: for reading the
//              history (the verdict counts from the promotion,
//              checker_failover.hpp).
// A server that does not answer (stopped, killed) keeps its last role, so a
// killed master that restarts and is made a replica is a demotion, not a
// promotion.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "history.hpp"
#include "support/raw_connection.hpp"

namespace lockon::verify {

class RoleWatcher {
 public:
  /// Starts watching `ports`, of which `master_port` is the master now.
  /// `window`: how long after a promotion clients may still be granted
  /// locks on the old master (the checker's allowance, written in each
  /// promotion record).
  RoleWatcher(std::vector<int> ports, std::vector<int> sentinel_ports, int master_port,
              std::chrono::milliseconds window, LineLog& log);
  ~RoleWatcher();
  RoleWatcher(const RoleWatcher&) = delete;
  RoleWatcher& operator=(const RoleWatcher&) = delete;

  /// Promotions seen so far.
  int promotions() const { return promotions_.load(); }
  /// The port last seen promoted (or the first master).
  int master_port() const { return master_port_.load(); }
  /// Waits up to `timeout` for the promotions count to exceed `seen`;
  /// returns the new master's port, or 0 on timeout.
  int wait_for_promotion(int seen, std::chrono::milliseconds timeout) const;

 private:
  void run();
  void watch_names(std::map<int, std::unique_ptr<test::RawConnection>>& connections, std::map<int, int>& names,
                   std::set<int>& named);

  std::vector<int> ports_;
  std::vector<int> sentinel_ports_;
  std::chrono::milliseconds window_;
  LineLog& log_;
  std::atomic<int> promotions_{0};
  std::atomic<int> master_port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lockon::verify
