// support/black_hole_listener.hpp — a 127.0.0.1 port that accepts no
// connection: a connect() to it neither succeeds nor is refused, it hangs
// until the caller's timeout, like a host that drops SYNs.
//
// How: a listening socket with backlog 0 whose accept queue is filled by a
// couple of connections that are never accepted. Linux then drops further
// SYNs (the client keeps retransmitting), so no root-only tricks (iptables,
// tc) are needed. Closing the listener makes pending connects fail.
//
// Not thread-safe; construct and destroy on one thread. Throws
// std::runtime_error if the port cannot be set up or does not black-hole
// (verified in the constructor with a 100 ms connect).
#pragma once

#include <string>
#include <vector>

namespace lockon::test {

class BlackHoleListener {
 public:
  BlackHoleListener();
  ~BlackHoleListener();
  BlackHoleListener(const BlackHoleListener&) = delete;
  BlackHoleListener& operator=(const BlackHoleListener&) = delete;

  int port() const noexcept { return port_; }
  /// "redis://127.0.0.1:<port>".
  std::string url() const;
  /// "127.0.0.1:<port>".
  std::string endpoint() const;

 private:
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

}  // namespace lockon::test
