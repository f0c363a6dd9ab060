// A throwaway redis-server for the examples: a free loopback port, no
// persistence, stopped by its PID when the object goes away. Only for demos:
// production code points lockon at real servers.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <lockon/lockon.hpp>

namespace demo {

class ThrowawayServer {
 public:
  ThrowawayServer() {
    char dir_template[] = "/tmp/lockon-demo-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) throw std::runtime_error("cannot create a temporary directory");
    dir_ = dir_template;
    port_ = free_port();
    const std::vector<std::string> args{"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                        "--save", "", "--appendonly", "no", "--dir", dir_,
                                        "--logfile", dir_ + "/redis.log"};
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the demo
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    const lockon::Client client(url());
    for (int attempt = 0; attempt < 250; ++attempt) {  // up to ~5 s
      try {
        client.ping();
        return;
      } catch (const lockon::Error&) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          throw std::runtime_error("redis-server exited at start (is it installed? scripts/setup-deps.sh)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    stop();
    throw std::runtime_error("redis-server did not answer PING within 5 s");
  }
  ~ThrowawayServer() { stop(); }
  ThrowawayServer(const ThrowawayServer&) = delete;
  ThrowawayServer& operator=(const ThrowawayServer&) = delete;

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }

 private:
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      if (fd >= 0) close(fd);
      throw std::runtime_error("cannot find a free loopback port");
    }
    close(fd);
    return ntohs(address.sin_port);
  }

  void stop() noexcept {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace demo
