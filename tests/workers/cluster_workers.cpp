// workers/cluster_workers.cpp — worker sub-commands for the Redis Cluster
// tests (tests/integration/test_cluster.cpp).
//
//   cluster_increment URL PREFIX KEYS ROUNDS
//       ROUNDS times over KEYS lock names "PREFIX:<k>" (spread over every
//       shard): a racy GET + SET of the counter "{PREFIX:<k>}:n" (the lock's
//       slot) under the lock. Prints "done <sections>".
#include <chrono>
#include <iostream>
#include <string>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(cluster_increment)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) {
    std::cerr << "usage: cluster_increment URL PREFIX KEYS ROUNDS\n";
    return 2;
  }
  const lockon::Client client(args[0]);
  const long long keys = std::stoll(args[2]);
  const long long rounds = std::stoll(args[3]);
  long long sections = 0;
  for (long long r = 0; r < rounds; ++r) {
    for (long long k = 0; k < keys; ++k) {
      const std::string name = args[1] + ":" + std::to_string(k);
      const std::string counter = "{" + name + "}:n";
      lockon::Lock lock(client, name, {.ttl = std::chrono::seconds(10)});
      const lockon::LockGuard guard(lock, std::chrono::seconds(20));
      const lockon::Reply value = client.command({"GET", counter});
      const long long next = (value.is_nil() ? 0 : std::stoll(value.as_string())) + 1;
      client.command({"SET", counter, std::to_string(next)});
      ++sections;
    }
  }
  std::cout << "done " << sections << std::endl;
  return 0;
}
