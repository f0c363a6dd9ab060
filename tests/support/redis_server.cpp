// support/redis_server.cpp — see redis_server.hpp.
#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "support/process.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kReadyTimeout = 5s;     // per start attempt
constexpr int kFreshStartAttempts = 5;  // new port each time the port was taken
constexpr auto kRestartPortRetry = 2s;  // same port: wait for it to free up
constexpr auto kTermGrace = 3s;         // SIGTERM -> SIGKILL
constexpr auto kPollInterval = 5ms;

// ------------------------------------------------------------ free ports

/// Ports handed to live RedisServers of this process, so start_servers never
/// picks one twice before the first server has bound it. Leaked on purpose:
/// a static RedisServer releases its port during static destruction.
struct PortRegistry {
  std::mutex mutex;
  std::set<int> in_use;
};
PortRegistry& ports() {
  static auto* const registry = new PortRegistry;
  return *registry;
}

/// Whether redis could bind 127.0.0.1:port right now (SO_REUSEADDR like
/// redis, so TIME_WAIT leftovers do not count as busy).
bool can_bind(int port, int* bound_port = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  if (ok && bound_port != nullptr) {
    socklen_t length = sizeof address;
    ok = ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
    *bound_port = ntohs(address.sin_port);
  }
  ::close(fd);
  return ok;
}

/// Lowest port the kernel hands out for outgoing connections (32768 usually).
int ephemeral_range_start() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return (range >> low) ? low : 32768;
}

/// A currently free loopback port, preferably below the ephemeral range:
/// there no client socket can take it while the server is down (and a client
/// reconnecting to a dead server cannot self-connect to it).
int reserve_port() {
  static std::mt19937 random(static_cast<std::mt19937::result_type>(
      std::random_device{}() ^ static_cast<unsigned>(::getpid()) ^
      static_cast<unsigned>(Clock::now().time_since_epoch().count())));
  auto& registry = ports();
  const std::lock_guard lock(registry.mutex);
  const int low = 10000;
  const int high = ephemeral_range_start() - 1;
  if (high > low + 1000) {
    std::uniform_int_distribution<int> pick(low, high);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = pick(random);
      if (registry.in_use.count(port) == 0 && can_bind(port)) {
        registry.in_use.insert(port);
        return port;
      }
    }
  }
  for (int attempt = 0; attempt < 50; ++attempt) {  // fall back to the kernel's choice
    int port = 0;
    if (can_bind(0, &port) && registry.in_use.count(port) == 0) {
      registry.in_use.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free port on 127.0.0.1");
}

void release_port(int port) {
  auto& registry = ports();
  const std::lock_guard lock(registry.mutex);
  registry.in_use.erase(port);
}

// ------------------------------------------------------------- helpers

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream words(text);
  std::vector<std::string> result;
  for (std::string word; words >> word;) result.push_back(word);
  return result;
}

std::string tail_lines(const std::string& text, std::size_t lines) {
  std::size_t position = text.size();
  if (position > 0 && text[position - 1] == '\n') --position;
  for (std::size_t seen = 0; position > 0; --position) {
    if (text[position - 1] == '\n' && ++seen == lines) break;
  }
  return text.substr(position);
}

std::string percent_encode(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    }
  }
  return out;
}

/// The one-letter state in /proc/PID/stat ('T' when stopped), or '?'.
char process_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return (paren != std::string::npos && paren + 2 < stat.size()) ? stat[paren + 2] : '?';
}

template <typename Predicate>
bool poll_until(std::chrono::milliseconds timeout, Predicate done) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
}

std::string redis_server_binary() {
  const char* configured = std::getenv("LOCKON_REDIS_SERVER");
  return configured != nullptr && *configured != '\0' ? configured : "redis-server";
}

}  // namespace

// --------------------------------------------------------- RedisServer

RedisServer::RedisServer(ServerOptions options) : RedisServer(std::move(options), Deferred{}) {
  // The delegated constructor finished, so a throw here runs ~RedisServer.
  finish_fresh_start();
}

RedisServer::RedisServer(ServerOptions options, Deferred) : options_(std::move(options)) {
  dir_ = make_temp_dir("lockon-redis");
  try {
    port_ = reserve_port();
    launch();
  } catch (...) {
    if (port_ != 0) release_port(port_);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

RedisServer::~RedisServer() {
  try {
    // SIGKILL, not SIGTERM: redis acts on SIGTERM only in its next serverCron
    // tick (up to 100 ms at the default hz 10), which every test would pay,
    // and a server without persistence has nothing to flush.
    terminate(SIGKILL, 5s);
  } catch (...) {  // a destructor must not throw; the process is SIGKILLed anyway
  }
  release_port(port_);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void RedisServer::launch() {
  const auto log = dir_ / "redis.log";
  const auto output = dir_ / "stdout.log";
  std::error_code missing;
  log_offset_ = std::filesystem::exists(log) ? std::filesystem::file_size(log, missing) : 0;
  stdout_offset_ = std::filesystem::exists(output) ? std::filesystem::file_size(output, missing) : 0;

  std::vector<std::string> argv{
      redis_server_binary(), "--port", std::to_string(port_), "--bind", "127.0.0.1",
      "--save", "", "--appendonly", "no", "--dir", dir_.string(),
      "--logfile", log.string(), "--daemonize", "no", "--protected-mode", "no",
      // DEBUG SLEEP & co. let tests simulate a slow server without SIGSTOP.
      "--enable-debug-command", "local"};
  if (!options_.requirepass.empty()) {
    argv.insert(argv.end(), {"--requirepass", options_.requirepass});
  }
  for (const auto& rules : options_.acl_users) {
    argv.emplace_back("--user");
    for (auto& word : split_words(rules)) argv.push_back(std::move(word));
  }
  argv.insert(argv.end(), options_.extra_args.begin(), options_.extra_args.end());

  // Early errors (bad config) go to stdout/stderr before the log file is open.
  const int output_fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (output_fd < 0) throw std::runtime_error("cannot open " + output.string());
  try {
    pid_ = spawn_raw(argv, {}, output_fd, output_fd);
  } catch (...) {
    ::close(output_fd);
    throw;
  }
  ::close(output_fd);
  paused_ = false;
}

std::string RedisServer::new_log_text() const {
  const std::string log = read_file(dir_ / "redis.log");
  const std::string output = read_file(dir_ / "stdout.log");
  return (log_offset_ < log.size() ? log.substr(log_offset_) : "") +
         (stdout_offset_ < output.size() ? output.substr(stdout_offset_) : "");
}

RedisServer::Outcome RedisServer::await_ready(std::chrono::milliseconds timeout, std::string& why) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (const auto status = wait_for_exit(pid_, 0ms)) {
      pid_ = -1;
      if (new_log_text().find("Address already in use") != std::string::npos) {
        why = "port " + std::to_string(port_) + " is already in use";
        return Outcome::port_busy;
      }
      why = "redis-server exited during startup (" +
            (WIFSIGNALED(*status) ? "signal " + std::to_string(WTERMSIG(*status))
                                  : "exit " + std::to_string(WEXITSTATUS(*status))) +
            ")";
      return Outcome::failed;
    }
    // Our own log saying "ready" proves the listener on the port is ours,
    // not another test process's server that grabbed the port first.
    if (new_log_text().find("Ready to accept connections") != std::string::npos) {
      try {
        RawConnection probe(host(), port_, {.connect_timeout = 200ms, .command_timeout = 1000ms});
        probe.command({"PING"});  // any reply (even NOAUTH) means it serves
        return Outcome::ready;
      } catch (const RawIoError&) {
      }
    }
    if (Clock::now() >= deadline) {
      why = "no PING reply within " + std::to_string(timeout.count()) + " ms";
      return Outcome::failed;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void RedisServer::finish_fresh_start() {
  for (int attempt = 1;; ++attempt) {
    std::string why;
    const Outcome outcome = await_ready(kReadyTimeout, why);
    if (outcome == Outcome::ready) return;
    if (outcome != Outcome::port_busy || attempt == kFreshStartAttempts) fail(why);
    // Lost a race for the port with another process: take another one.
    release_port(port_);
    port_ = reserve_port();
    launch();
  }
}

void RedisServer::restart() {
  if (running()) stop();
  const auto give_up = Clock::now() + kRestartPortRetry;
  for (;;) {
    launch();
    std::string why;
    const Outcome outcome = await_ready(kReadyTimeout, why);
    if (outcome == Outcome::ready) return;
    if (outcome != Outcome::port_busy || Clock::now() >= give_up) fail(why);
    std::this_thread::sleep_for(50ms);
  }
}

void RedisServer::fail(const std::string& why) {
  const std::string tail = log_tail();
  try {
    terminate(SIGKILL, 5s);
  } catch (...) {
  }
  throw std::runtime_error("redis-server on 127.0.0.1:" + std::to_string(port_) +
                           " failed to start: " + why + "\n--- log tail (" + dir_.string() +
                           ") ---\n" + tail);
}

void RedisServer::terminate(int signal, std::chrono::milliseconds grace) {
  if (pid_ < 0) return;
  ::kill(pid_, signal);
  ::kill(pid_, SIGCONT);  // a paused server acts on SIGTERM only once continued
  auto status = wait_for_exit(pid_, grace);
  if (!status) {
    ::kill(pid_, SIGKILL);
    status = wait_for_exit(pid_, 5s);
  }
  if (!status) {
    throw std::runtime_error("redis-server pid " + std::to_string(pid_) +
                             " survived SIGKILL for 5 s");
  }
  pid_ = -1;
  paused_ = false;
}

bool RedisServer::running() const {
  if (pid_ < 0) return false;
  if (wait_for_exit(pid_, 0ms)) {
    pid_ = -1;
    return false;
  }
  return true;
}

void RedisServer::kill() { terminate(SIGKILL, 5s); }

void RedisServer::stop() { terminate(SIGTERM, kTermGrace); }

void RedisServer::pause() {
  if (!running()) throw std::logic_error("RedisServer::pause: server is not running");
  ::kill(pid_, SIGSTOP);
  if (!poll_until(2s, [&] { return process_state(pid_) == 'T'; })) {
    throw std::runtime_error("redis-server pid " + std::to_string(pid_) + " did not stop");
  }
  paused_ = true;
}

void RedisServer::resume() {
  if (!running()) throw std::logic_error("RedisServer::resume: server is not running");
  ::kill(pid_, SIGCONT);
  if (!poll_until(2s, [&] { return process_state(pid_) != 'T'; })) {
    throw std::runtime_error("redis-server pid " + std::to_string(pid_) + " did not continue");
  }
  paused_ = false;
}

std::string RedisServer::url() const {
  if (options_.requirepass.empty()) return url_without_auth();
  return "redis://:" + percent_encode(options_.requirepass) + "@127.0.0.1:" +
         std::to_string(port_);
}

std::string RedisServer::url_without_auth() const {
  return "redis://127.0.0.1:" + std::to_string(port_);
}

std::string RedisServer::log_tail(std::size_t lines) const {
  std::string text = tail_lines(read_file(dir_ / "redis.log"), lines);
  const std::string output = read_file(dir_ / "stdout.log");
  if (!output.empty()) text += "\n--- stdout/stderr ---\n" + tail_lines(output, lines);
  return text;
}

RawConnection RedisServer::connect() const {
  RawConnectOptions options;
  options.password = options_.requirepass;
  return connect(options);
}

RawConnection RedisServer::connect(const RawConnectOptions& options) const {
  return RawConnection(host(), port_, options);
}

RawReply RedisServer::command(const std::vector<std::string>& args) const {
  return connect().command(args);
}

std::vector<std::unique_ptr<RedisServer>> start_servers(std::size_t n, ServerOptions options) {
  std::vector<std::unique_ptr<RedisServer>> servers;
  servers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    servers.push_back(std::unique_ptr<RedisServer>(new RedisServer(options, RedisServer::Deferred{})));
  }
  for (auto& server : servers) server->finish_fresh_start();
  return servers;
}

int reserve_free_port() { return reserve_port(); }
void release_free_port(int port) { release_port(port); }

}  // namespace lockon::test
