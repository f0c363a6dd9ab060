// support/paused_server.hpp — a SIGSTOPped server that cannot outlive its
// scope.
//
// A test that freezes a node of a shared fixture (a cluster started once per
// suite) and then fails an assertion or throws would leave it frozen for
// every later test (their set-up then waits for a settled cluster in vain).
// PausedServer SIGSTOPs on construction and SIGCONTs in its destructor; if
// SIGCONT cannot be confirmed the process is SIGKILLed instead, so it is
// never left stopped either way.
//
// No GoogleTest here: benchmarks may reuse this.
#pragma once

#include "support/redis_server.hpp"

namespace lockon::test {

class PausedServer {
 public:
  /// SIGSTOPs `server`; returns once it is stopped.
  explicit PausedServer(RedisServer& server) : server_(&server) { server_->pause(); }
  /// SIGCONTs it now (idempotent); the destructor then does nothing.
  void resume() {
    if (server_ != nullptr && server_->paused()) server_->resume();
    server_ = nullptr;
  }
  ~PausedServer() {
    if (server_ == nullptr || !server_->paused()) return;
    try {
      server_->resume();
    } catch (...) {
      try {
        server_->kill();  // never left stopped
      } catch (...) {
      }
    }
  }
  PausedServer(const PausedServer&) = delete;
  PausedServer& operator=(const PausedServer&) = delete;

 private:
  RedisServer* server_;
};

}  // namespace lockon::test
