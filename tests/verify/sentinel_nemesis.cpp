// verify/sentinel_nemesis.cpp — how each Sentinel-topology fault is injected.
#include "sentinel_nemesis.hpp"

#include <iostream>
#include <string>
#include <thread>

namespace lockon::verify {

namespace {

// A promotion needs down-after (1 s) plus an election, or a SENTINEL
// FAILOVER's round; on a loaded 2-core machine give it this long.
constexpr auto kPromotionBound = std::chrono::seconds(12);

std::string promoted_text(int port) { return port == 0 ? "none" : std::to_string(port); }

}  // namespace

void SentinelNemesis::before_fault() {
  if (dead_ >= 0 && std::chrono::steady_clock::now() >= restart_due_) restart_dead();
}

void SentinelNemesis::restart_dead() {
  if (dead_ < 0) return;
  const std::int64_t start = now_ns();
  const int index = dead_;
  const int master = cluster_.master_index();
  test::SentinelSet& set = cluster_.sentinels();
  if (master < 0 || master == index) {
    // No failover happened: it comes back as the master it was.
    set.data_server(static_cast<std::size_t>(index)).restart();
  } else {
    set.restart_as_replica_of(static_cast<std::size_t>(index), set.data_server(static_cast<std::size_t>(master)).port());
  }
  dead_ = -1;
  record("master_restart", "master:" + std::to_string(set.data_server(static_cast<std::size_t>(index)).port()), start,
         master < 0 || master == index ? "as_master" : "replica_of=" + std::to_string(set.data_server(static_cast<std::size_t>(master)).port()));
}

int SentinelNemesis::live_master() {
  int master = cluster_.master_index();
  if (master >= 0 && master == dead_) {
    restart_dead();
    master = cluster_.master_index();
  }
  return master;
}

void SentinelNemesis::settle(int promoted, int old_port) {
  if (promoted == 0) return;
  // The sentinel that led the failover names the new master only when the
  // failover ends (failover-timeout at most), then the others follow.
  const int agreed =
      cluster_.sentinels().wait_for_new_master(old_port, failover_timeout_ + std::chrono::seconds(5));
  if (agreed != promoted) std::cerr << "sentinel nemesis: after promoting " << promoted << " the sentinels agree on "
                                    << agreed << " (0: no agreement in time)\n";
}

void SentinelNemesis::wait_settled() {
  // A killed master comes back before the next fault of a server: killing
  // the new master with the old one still down leaves no replica to
  // promote (seed 22: no master for 18 s, every call a ConnectError).
  restart_dead();
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t start_ns = now_ns();
  // Sentinel reconfigures the old master up to ~11 s after a promotion here.
  const auto until = start + 2 * failover_timeout_ + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < until) {
    if (cluster_.settled_master() != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  record("settle_timeout", "sentinels", start_ns, "waited_ms=" + std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count()));
}

void SentinelNemesis::inject_server_fault(std::string_view kind) {
  wait_settled();
  if (std::chrono::steady_clock::now() >= end_) return;
  test::SentinelSet& set = cluster_.sentinels();
  const int promotions = roles_.promotions();
  const int old_master = roles_.master_port();
  if (kind == "sentinel_failover") {
    const int sentinel = pick(static_cast<int>(set.sentinel_count()));
    const std::int64_t start = now_ns();
    std::string reply;
    try {
      const test::RawReply answer =
          set.sentinel_command_at(static_cast<std::size_t>(sentinel), {"SENTINEL", "FAILOVER", set.kMasterName});
      reply = answer.is_error() ? answer.str.substr(0, answer.str.find(' ')) : "OK";
    } catch (const std::exception&) {
      reply = "no_answer";
    }
    const int promoted = reply == "OK" ? roles_.wait_for_promotion(promotions, kPromotionBound) : 0;
    record(kind, "sentinel" + std::to_string(sentinel), start,
           "reply=" + reply + ":promoted=" + promoted_text(promoted));
    settle(promoted, old_master);
  } else if (kind == "master_kill") {
    const int master = live_master();
    if (master < 0) return;
    test::RedisServer& server = set.data_server(static_cast<std::size_t>(master));
    const int port = server.port();
    const Millis down = between(0.25, 3.0);  // before the restart as a replica
    const std::int64_t start = now_ns();
    server.kill();
    const int promoted = roles_.wait_for_promotion(promotions, kPromotionBound);
    record(kind, "master:" + std::to_string(port), start,
           "promoted=" + promoted_text(promoted) + ":restart_after_ms=" + std::to_string(down.count()));
    dead_ = master;
    restart_due_ = std::chrono::steady_clock::now() + down;
    settle(promoted, old_master);
  } else if (kind == "master_stall_short" || kind == "master_stall_long") {
    const int master = live_master();
    if (master < 0) return;
    test::RedisServer& server = set.data_server(static_cast<std::size_t>(master));
    // down-after is 1 s: short stays well below it, long well above.
    const Millis length = kind == "master_stall_short" ? between(0.15, 0.4) : between(0.65, 1.5);
    const std::int64_t start = now_ns();
    server.pause();
    sleep_for(length);
    server.resume();
    const int promoted = roles_.promotions() > promotions ? roles_.master_port() : 0;
    record(kind, "master:" + std::to_string(server.port()), start,
           "ms=" + std::to_string(length.count()) + ":promoted=" + promoted_text(promoted));
    // A failover started late in the stall may finish after SIGCONT.
    if (promoted == 0 && kind == "master_stall_long") settle(roles_.wait_for_promotion(promotions, Millis(1500)), old_master);
    settle(promoted, old_master);
  }
}

}  // namespace lockon::verify
