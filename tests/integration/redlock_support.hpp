// integration/redlock_support.hpp — shared helpers of the Redlock tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/redlock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {

/// Records every NodeEvent (thread-safe).
class EventLog {
 public:
  std::function<void(const NodeEvent&)> hook() {
    return [this](const NodeEvent& event) {
      std::lock_guard guard(mutex_);
      events_.push_back(event);
    };
  }
  std::vector<NodeEvent> events() const {
    std::lock_guard guard(mutex_);
    return events_;
  }
  void clear() {
    std::lock_guard guard(mutex_);
    events_.clear();
  }
  /// Events of one operation, optionally only with one outcome.
  std::vector<NodeEvent> of(NodeOperation operation) const {
    std::vector<NodeEvent> out;
    for (const auto& event : events())
      if (event.operation == operation) out.push_back(event);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<NodeEvent> events_;
};

/// A fixture with N throwaway servers (started fresh per test).
class RedlockServers : public ::testing::Test {
 protected:
  void start(std::size_t n) { servers_ = start_servers(n); }
  RedisServer& server(std::size_t i) { return *servers_.at(i); }
  std::size_t count() const { return servers_.size(); }
  std::vector<std::string> urls() const {
    std::vector<std::string> out;
    for (const auto& server : servers_) out.push_back(server->url());
    return out;
  }
  std::string urls_csv() const {
    std::string out;
    for (const auto& server : servers_) out += (out.empty() ? "" : ",") + server->url();
    return out;
  }
  std::string endpoint(std::size_t i) const { return "127.0.0.1:" + std::to_string(servers_.at(i)->port()); }
  /// GET of `key` on server i (nil → "").
  std::string get(std::size_t i, const std::string& key) {
    const RawReply reply = server(i).command({"GET", key});
    return reply.is_nil() ? std::string() : reply.str;
  }
  /// How many running servers have `key`.
  int holders(const std::string& key) {
    int n = 0;
    for (const auto& s : servers_)
      if (s->running() && !s->paused() && s->command({"EXISTS", key}).integer == 1) ++n;
    return n;
  }
  /// holders(key) once it reads `expected`, or after `within` (then the count
  /// it last read). A Redlock call returns once a majority decided: the
  /// remaining node's command is sent but its reply not waited for beyond a
  /// short grace, so on a loaded machine it may run a moment after the call
  /// returned. `within` stays far below the tests' TTLs: a key that only
  /// expired does not pass for one that was released or undone.
  int holders_settled(const std::string& key, int expected, std::chrono::milliseconds within = std::chrono::milliseconds(500)) {
    int n = 0;
    eventually(within, [&] { return (n = holders(key)) == expected; });
    return n;
  }

  std::vector<std::unique_ptr<RedisServer>> servers_;
};

}  // namespace lockon::test
