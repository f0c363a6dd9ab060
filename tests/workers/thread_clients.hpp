// workers/thread_clients.hpp — the Clients of a worker's threads: one
// shared by all (one subscriber per server: the process's waiters queue
// through it), or one each (they queue through different subscribers of
// the same process).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "lockon/client.hpp"

namespace lockon::test::worker {

class ThreadClients {
 public:
  /// Connected (PING) before any thread starts.
  ThreadClients(const std::string& url, std::size_t threads, bool one_each) : one_each_(one_each) {
    for (std::size_t t = 0; t < (one_each ? threads : 1); ++t) clients_.emplace_back(url).ping();
  }
  const lockon::Client& of(std::size_t thread) const { return clients_[one_each_ ? thread : 0]; }

 private:
  bool one_each_;
  std::vector<lockon::Client> clients_;
};

}  // namespace lockon::test::worker
