// workers/harness.cpp — commands that test the test harness itself.
#include <unistd.h>

#include <csignal>
#include <iostream>

#include "support/redis_server.hpp"
#include "support/worker_registry.hpp"

// Starts a redis-server, reports it as "server <pid> <port> <dir>", then dies by
// SIGKILL without any cleanup: the server must die with us (PDEATHSIG).
LOCKON_WORKER_COMMAND(start_server_and_die)(const std::vector<std::string>&) -> int {
  lockon::test::RedisServer server;
  std::cout << "server " << server.pid() << ' ' << server.port() << ' ' << server.dir().string()
            << std::endl;
  ::kill(::getpid(), SIGKILL);
  return 1;  // not reached
}
