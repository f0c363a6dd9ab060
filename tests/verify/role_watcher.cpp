// verify/role_watcher.cpp — polling ROLE of the Sentinel topology's data servers.
#include "role_watcher.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "support/raw_connection.hpp"

namespace lockon::verify {

namespace {

constexpr auto kPeriod = std::chrono::milliseconds(20);

// One command's reply, nullopt when the server does not answer in time
// (the connection is then dropped and made again next round).
std::optional<test::RawReply> ask(int port, std::unique_ptr<test::RawConnection>& connection,
                                  const std::vector<std::string>& command) {
  try {
    if (!connection)
      connection = std::make_unique<test::RawConnection>(
          "127.0.0.1", port,
          test::RawConnectOptions{.connect_timeout = std::chrono::milliseconds(100),
                                  .command_timeout = std::chrono::milliseconds(150)});
    return connection->command(command);
  } catch (...) {
    connection.reset();
    return std::nullopt;
  }
}

// One server's ROLE ("master", "slave"), nullopt without an answer.
std::optional<std::string> role_of(int port, std::unique_ptr<test::RawConnection>& connection) {
  const auto reply = ask(port, connection, {"ROLE"});
  if (!reply || reply->elements.empty()) return std::nullopt;
  return reply->elements[0].str;
}

}  // namespace

RoleWatcher::RoleWatcher(std::vector<int> ports, std::vector<int> sentinel_ports, int master_port,
                         std::chrono::milliseconds window, LineLog& log)
    : ports_(std::move(ports)),
      sentinel_ports_(std::move(sentinel_ports)),
      window_(window),
      log_(log),
      master_port_(master_port) {
  thread_ = std::thread([this] { run(); });
}

RoleWatcher::~RoleWatcher() {
  stop_ = true;
  thread_.join();
}

int RoleWatcher::wait_for_promotion(int seen, std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (promotions_.load() > seen) return master_port_.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

// The ports the sentinels name as master; a sentinel that does not answer
// keeps naming what it named last.
void RoleWatcher::watch_names(std::map<int, std::unique_ptr<test::RawConnection>>& connections,
                              std::map<int, int>& names, std::set<int>& named) {
  for (const int sentinel : sentinel_ports_) {
    const auto reply = ask(sentinel, connections[sentinel], {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"});
    if (reply && reply->elements.size() == 2) names[sentinel] = std::stoi(reply->elements[1].str);
  }
  std::set<int> now;
  for (const auto& [sentinel, port] : names) now.insert(port);
  const std::int64_t seen = now_ns();
  for (const int port : named)
    if (now.count(port) == 0)
      log_.append(format(FaultRecord{.type = "unnamed", .target = "master:" + std::to_string(port),
                                     .start_ns = seen, .end_ns = seen, .detail = "-"}));
  for (const int port : now)
    if (named.count(port) == 0 && !named.empty())
      log_.append(format(FaultRecord{.type = "named", .target = "master:" + std::to_string(port),
                                     .start_ns = seen, .end_ns = seen, .detail = "-"}));
  named = now;
}

void RoleWatcher::run() {
  std::map<int, std::string> last;  // port -> last role it answered
  std::map<int, std::unique_ptr<test::RawConnection>> connections;
  std::map<int, std::unique_ptr<test::RawConnection>> sentinel_connections;
  std::map<int, int> names;  // sentinel port -> master port it named last
  std::set<int> named;
  while (!stop_) {
    const auto round = std::chrono::steady_clock::now();
    watch_names(sentinel_connections, names, named);
    for (const int port : ports_) {
      const std::optional<std::string> role = role_of(port, connections[port]);
      if (!role) continue;
      std::string& before = last[port];
      const std::int64_t seen = now_ns();
      if (*role == "master" && before == "slave") {
        const int old = master_port_.exchange(port);
        log_.append(format(FaultRecord{
            .type = "promotion", .target = "master:" + std::to_string(port), .start_ns = seen,
            .end_ns = seen + std::chrono::nanoseconds(window_).count(),
            .detail = "old=" + std::to_string(old) + ":new=" + std::to_string(port) +
                      ":window_ms=" + std::to_string(window_.count())}));
        ++promotions_;
      } else if (*role == "slave" && before == "master") {
        log_.append(format(FaultRecord{.type = "demotion", .target = "master:" + std::to_string(port),
                                       .start_ns = seen, .end_ns = seen, .detail = "-"}));
        before = *role;
        // The master last promoted lost its role while another server never
        // stopped saying master (sentinels that had not all switched sent it
        // back): that one is the master again, a promotion in all but ROLE.
        if (port == master_port_.load())
          for (const auto& [other, other_role] : last)
            if (other != port && other_role == "master") {
              master_port_ = other;
              log_.append(format(FaultRecord{
                  .type = "promotion", .target = "master:" + std::to_string(other), .start_ns = seen,
                  .end_ns = seen + std::chrono::nanoseconds(window_).count(),
                  .detail = "old=" + std::to_string(port) + ":new=" + std::to_string(other) +
                            ":window_ms=" + std::to_string(window_.count()) + ":reverted=1"}));
              ++promotions_;
              break;
            }
      }
      before = *role;
    }
    std::this_thread::sleep_until(round + kPeriod);
  }
}

}  // namespace lockon::verify
