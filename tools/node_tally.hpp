// tools/node_tally.hpp — what each Redlock node answered to the latest
// acquire, so `lockon run -v` can say "acquired on 2 of 3 nodes" and name the
// nodes that failed with their errors (issue 17).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "lockon/redlock.hpp"

namespace lockon::cli {

class NodeTally {
 public:
  /// Called from Redlock's node-event callback (any thread). Keeps the
  /// latest acquire answer per endpoint: every attempt asks every node, so
  /// after a success these are the winning attempt's answers.
  void record(const NodeEvent& event);

  /// "2 of 3 nodes (failed: 127.0.0.1:7001: connection refused)"; `total`
  /// counts nodes that never answered as failed.
  std::string summary(std::size_t total) const;

 private:
  struct Answer {
    bool ok = false;
    std::string detail;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Answer> answers_;
};

}  // namespace lockon::cli
