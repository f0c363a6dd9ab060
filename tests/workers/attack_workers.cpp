// workers/attack_workers.cpp — worker sub-commands for
// tests/integration/test_auto_pipeline_attack.cpp.
//
//   attack_mix URL PREFIX STOP_NS SEED
//       Runs attack::run_mix (integration/attack_mix.hpp) on a default
//       Client of URL until steady-clock STOP_NS, then prints
//       "sections <s0> <s1> errors <e> timeouts <t> lost <l>" and exits 0,
//       or prints "failure <why>" and exits 1.
#include <chrono>
#include <iostream>
#include <string>

#include "integration/attack_mix.hpp"
#include "lockon/client.hpp"
#include "support/worker_registry.hpp"

LOCKON_WORKER_COMMAND(attack_mix)(const std::vector<std::string>& args) -> int {
  if (args.size() != 4) {
    std::cerr << "usage: attack_mix URL PREFIX STOP_NS SEED\n";
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0] + "?socket_timeout=10s");
  const auto stop = Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(std::stoll(args[2]))));
  const auto result = lockon::test::attack::run_mix(client, data, args[1], stop, static_cast<unsigned>(std::stoul(args[3])));
  if (!result.failure.empty()) {
    std::cout << "failure " << result.failure << std::endl;
    return 1;
  }
  std::cout << "sections";
  for (long long s : result.sections) std::cout << ' ' << s;
  std::cout << " errors " << result.typed_errors << " timeouts " << result.timeouts << " lost " << result.lost << std::endl;
  return 0;
}
