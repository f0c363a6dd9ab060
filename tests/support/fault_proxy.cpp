// support/fault_proxy.cpp — FaultProxy's public side: the listener, rules and
// knobs shared with the proxy thread (its loop is in fault_proxy_loop.cpp).
#include "support/fault_proxy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "support/fault_proxy_internal.hpp"

namespace lockon::test {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("FaultProxy: " + what + ": " + std::strerror(errno));
}

}  // namespace

std::string FaultRule::error_text(std::string_view code) {
  if (code == "OOM") return "OOM command not allowed when used memory > 'maxmemory'.";
  if (code == "READONLY") return "READONLY You can't write against a read only replica.";
  if (code == "NOPERM") return "NOPERM this user has no permissions to run one of the commands used";
  if (code == "LOADING") return "LOADING Redis is loading the dataset in memory";
  if (code == "BUSY") {
    return "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
  }
  if (code == "MASTERDOWN") {
    return "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";
  }
  if (code == "TRYAGAIN") return "TRYAGAIN Multiple keys request during rehashing of slot";
  if (code == "NOSCRIPT") return "NOSCRIPT No matching script. Please use EVAL.";
  return std::string(code) + " error injected by FaultProxy";
}

FaultProxy::FaultProxy(std::string upstream_host, int upstream_port)
    : FaultProxy(std::move(upstream_host), upstream_port, make_thread()) {}

FaultProxy::FaultProxy(std::string upstream_host, int upstream_port, std::shared_ptr<Thread> thread)
    : thread_(std::move(thread)), upstream_host_(std::move(upstream_host)), upstream_port_(upstream_port) {
  if (!thread_) throw std::invalid_argument("FaultProxy: no thread");
  // The kernel's choice of port (bind to 0): RedisServer reserves its ports
  // below the ephemeral range in a registry of its own, and a proxy's port is
  // bound for the proxy's whole life, so it needs no such reservation and
  // must not take one of those. SO_REUSEADDR as Redis does.
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) fail("socket");
  const int yes = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int saved = errno;
    ::close(listen_fd_);
    errno = saved;
    fail("listen on 127.0.0.1");
  }
  port_ = ntohs(address.sin_port);
  thread_->attach(*this);
}

FaultProxy::~FaultProxy() {
  thread_->detach(*this);  // closes the connections; the loop lets go of this
  thread_.reset();         // the last proxy of a thread stops it
  ::close(listen_fd_);
}

std::shared_ptr<FaultProxy::Thread> FaultProxy::make_thread() { return std::make_shared<Thread>(); }

std::string FaultProxy::url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

void FaultProxy::wake() const noexcept { thread_->wake(); }

int FaultProxy::add_rule(FaultRule rule) {
  const std::lock_guard lock(mutex_);
  const int id = next_rule_id_++;
  const bool active = rule.times != 0;
  rules_.push_back({id, std::move(rule), active, 0});
  return id;
}

void FaultProxy::remove_rule(int id) {
  const std::lock_guard lock(mutex_);
  for (auto& slot : rules_) {
    if (slot.id == id) slot.active = false;
  }
}

void FaultProxy::clear_rules() {
  const std::lock_guard lock(mutex_);
  for (auto& slot : rules_) slot.active = false;
}

std::size_t FaultProxy::matched(int id) const {
  const std::lock_guard lock(mutex_);
  for (const auto& slot : rules_) {
    if (slot.id == id) return slot.matched;
  }
  return 0;
}

FaultProxy::Decision FaultProxy::decide(std::size_t connection, std::string_view name,
                                        const std::vector<std::string_view>& words) {
  const std::lock_guard lock(mutex_);
  for (auto& slot : rules_) {
    FaultRule& rule = slot.rule;
    if (!slot.active) continue;
    if (rule.connection >= 0 && static_cast<std::size_t>(rule.connection) != connection) continue;
    if (!rule.command.empty() && rule.command != name) continue;
    if (!rule.argument_contains.empty() &&
        std::none_of(words.begin() + (words.empty() ? 0 : 1), words.end(), [&](std::string_view word) {
          return word.find(rule.argument_contains) != std::string_view::npos;
        })) {
      continue;
    }
    ++slot.matched;
    if (rule.times > 0 && --rule.times == 0) slot.active = false;
    Decision decision{rule.action, rule.error, rule.delay};
    if (decision.action == FaultAction::error_reply && decision.error.empty()) {
      decision.error = "ERR error injected by FaultProxy";
    }
    return decision;
  }
  return {};
}

void FaultProxy::set_latency(std::chrono::microseconds each_way) {
  latency_us_.store(std::max<long long>(0, each_way.count()));
  wake();
}

void FaultProxy::refuse_new_connections(bool on) { refuse_.store(on); }

void FaultProxy::blackhole(bool on) {
  blackholed_.store(on);
  wake();  // a heal must flush what was held
}

void FaultProxy::drop_connections() {
  std::unique_lock lock(mutex_);
  const std::size_t request = ++drop_requests_;
  lock.unlock();
  wake();
  lock.lock();
  // The loop never blocks, so this is quick; bounded all the same.
  drops_cv_.wait_for(lock, std::chrono::seconds(5), [&] { return drops_done_ >= request; });
}

void FaultProxy::retarget(std::string host, int port) {
  const std::lock_guard lock(mutex_);
  upstream_host_ = std::move(host);
  upstream_port_ = port;
}

std::size_t FaultProxy::connection_count() const { return live_connections_.load(); }
std::size_t FaultProxy::connections_accepted() const { return accepted_.load(); }
std::size_t FaultProxy::commands_seen() const { return commands_seen_.load(); }

}  // namespace lockon::test
