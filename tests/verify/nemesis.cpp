// verify/nemesis.cpp — the fault schedule and how each fault is injected.
#include "nemesis.hpp"

#include <signal.h>

#include <iostream>
#include <thread>

namespace lockon::verify {

Nemesis::Nemesis(WorkerPool& workers, unsigned topology, std::uint64_t seed, std::chrono::milliseconds ttl,
                 LineLog& log)
    : workers_(workers), ttl_(ttl), log_(log), random_(seed) {
  for (const auto& kind : kFaults)
    if ((kind.topologies & topology) != 0) kinds_.push_back(kind.name);
}

Nemesis::Millis Nemesis::between(double low_ttl, double high_ttl) {
  const auto low = static_cast<long long>(low_ttl * static_cast<double>(ttl_.count()));
  const auto high = static_cast<long long>(high_ttl * static_cast<double>(ttl_.count()));
  return Millis(low + static_cast<long long>(random_() % static_cast<std::uint64_t>(high - low + 1)));
}

void Nemesis::sleep_for(Millis duration) { std::this_thread::sleep_for(duration); }

void Nemesis::record(std::string_view type, const std::string& target, std::int64_t start,
                     const std::string& detail) {
  ++counts_[std::string(type)];
  log_.append(format(FaultRecord{.type = std::string(type), .target = target, .start_ns = start,
                                 .end_ns = now_ns(), .detail = detail}));
}

test::FaultProxy& StandaloneNemesis::proxy_of(int target, std::string& name) {
  // Target 0 is the single lock server; 1..3 the Redlock nodes. The single
  // server is picked half of the time: most sections use it.
  if (target == 0) {
    name = "lock";
    return cluster_.lock_proxy();
  }
  name = "node" + std::to_string(target - 1);
  return cluster_.node_proxy(static_cast<std::size_t>(target - 1));
}

void Nemesis::run_until(std::chrono::steady_clock::time_point end) {
  end_ = end;
  while (std::chrono::steady_clock::now() < end) {
    const std::string_view kind = kinds_[random_() % kinds_.size()];
    const Millis calm = between(0.15, 0.75);
    sleep_for(calm);
    workers_.restart_crashed();
    if (std::chrono::steady_clock::now() >= end) break;
    before_fault();
    inject(kind);
  }
}

void Nemesis::inject(std::string_view kind) {
  const std::int64_t start = now_ns();
  if (kind == "pause_short" || kind == "pause_long") {
    const int id = pick(workers_.count());
    const Millis length = kind == "pause_short" ? between(0.1, 0.6) : between(1.3, 2.5);
    const std::string name = workers_.name(id);
    ::kill(workers_.pid(id), SIGSTOP);
    sleep_for(length);
    ::kill(workers_.pid(id), SIGCONT);
    record(kind, name, start, "ms=" + std::to_string(length.count()));
  } else if (kind == "kill_worker") {
    const int id = pick(workers_.count());
    const std::string name = workers_.name(id);
    workers_.kill_and_restart(id);
    record(kind, name, start, "restarted_as=" + workers_.name(id));
  } else {
    inject_server_fault(kind);
  }
}

void StandaloneNemesis::inject_server_fault(std::string_view kind) {
  const std::int64_t start = now_ns();
  const std::string rules_on = "vfy";  // every lock key (and queue, fence...) contains the prefix
  if (kind == "stall_lock" || kind == "stall_node") {
    const int node = kind == "stall_node" ? pick(static_cast<int>(cluster_.node_count())) : -1;
    test::RedisServer& server = node < 0 ? cluster_.lock_server() : cluster_.node(static_cast<std::size_t>(node));
    const Millis length = between(0.3, 1.5);
    server.pause();
    sleep_for(length);
    server.resume();
    record(kind, node < 0 ? "lock" : "node" + std::to_string(node), start, "ms=" + std::to_string(length.count()));
  } else if (kind == "restart_persistent" || kind == "restart_empty") {
    cluster_.restart_lock_server(kind == "restart_persistent");
    record(kind, "lock", start, "-");
  } else if (kind == "node_down") {
    const int node = pick(static_cast<int>(cluster_.node_count()));
    const Millis length = between(1.2, 2.0);
    cluster_.node(static_cast<std::size_t>(node)).kill();
    sleep_for(length);
    cluster_.node(static_cast<std::size_t>(node)).restart();
    record(kind, "node" + std::to_string(node), start, "down_ms=" + std::to_string(length.count()));
  } else if (kind == "proxy_error" || kind == "proxy_close") {
    std::string name;
    test::FaultProxy& proxy = proxy_of(pick(2) == 0 ? 0 : 1 + pick(3), name);
    static constexpr const char* commands[] = {"SET", "EVALSHA", "EVAL", "MULTI", "EXEC", ""};
    const std::string command = commands[pick(static_cast<int>(std::size(commands)))];
    test::FaultRule rule{.command = command,
                         .argument_contains = command == "MULTI" || command == "EXEC" ? "" : rules_on,
                         .times = 1 + pick(10)};
    std::string detail;
    if (kind == "proxy_error") {
      static constexpr const char* codes[] = {"OOM", "READONLY", "NOPERM", "LOADING", "BUSY", "TRYAGAIN"};
      const std::string code = codes[pick(static_cast<int>(std::size(codes)))];
      rule.action = test::FaultAction::error_reply;
      rule.error = test::FaultRule::error_text(code);
      detail = code;
    } else {
      static constexpr test::FaultAction actions[] = {test::FaultAction::close_before_forward,
                                                      test::FaultAction::close_after_forward,
                                                      test::FaultAction::close_mid_reply};
      static constexpr const char* action_names[] = {"before_forward", "after_forward", "mid_reply"};
      const int which = pick(3);
      rule.action = actions[which];
      detail = action_names[which];
    }
    const int times = rule.times;
    const int id = proxy.add_rule(std::move(rule));
    const Millis length = between(0.5, 1.5);
    sleep_for(length);
    proxy.remove_rule(id);
    record(kind, name, start,
           detail + ":" + (command.empty() ? "any" : command) + ":times=" + std::to_string(times) +
               ":fired=" + std::to_string(proxy.matched(id)));
  } else if (kind == "partition" || kind == "latency" || kind == "drop") {
    std::string name;
    test::FaultProxy& proxy = proxy_of(pick(2) == 0 ? 0 : 1 + pick(3), name);
    if (kind == "partition") {
      const Millis length = between(0.3, 1.5);
      proxy.blackhole(true);
      sleep_for(length);
      proxy.blackhole(false);
      record(kind, name, start, "ms=" + std::to_string(length.count()));
    } else if (kind == "latency") {
      const auto each_way = std::chrono::microseconds(1000 * (1 + pick(20)));
      const Millis length = between(0.5, 1.5);
      proxy.set_latency(each_way);
      sleep_for(length);
      proxy.set_latency(std::chrono::microseconds(0));
      record(kind, name, start, "us=" + std::to_string(each_way.count()) + ":ms=" + std::to_string(length.count()));
    } else {
      proxy.drop_connections();
      record(kind, name, start, "-");
    }
  }
}

}  // namespace lockon::verify
