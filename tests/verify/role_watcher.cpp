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

// One server's ROLE ("master", "slave"), nullopt when it does not answer
// in time (the connection is then dropped and made again next round).
std::optional<std::string> role_of(int port, std::unique_ptr<test::RawConnection>& connection) {
  try {
    if (!connection)
      connection = std::make_unique<test::RawConnection>(
          "127.0.0.1", port,
          test::RawConnectOptions{.connect_timeout = std::chrono::milliseconds(100),
                                  .command_timeout = std::chrono::milliseconds(150)});
    const test::RawReply reply = connection->command({"ROLE"});
    if (reply.elements.empty()) return std::nullopt;
    return reply.elements[0].str;
  } catch (...) {
    connection.reset();
    return std::nullopt;
  }
}

}  // namespace

RoleWatcher::RoleWatcher(std::vector<int> ports, int master_port, std::chrono::milliseconds window, LineLog& log)
    : ports_(std::move(ports)), window_(window), log_(log), master_port_(master_port) {
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

void RoleWatcher::run() {
  std::map<int, std::string> last;  // port -> last role it answered
  std::map<int, std::unique_ptr<test::RawConnection>> connections;
  while (!stop_) {
    const auto round = std::chrono::steady_clock::now();
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
