// lockon_cycle_probe VARIANT CYCLES [--redis-url=URL]
//
// Runs CYCLES uncontended cycles of one variant (floor, lock, lock_fenced,
// lock_no_holder_record, lock_on, decorated) after a warm-up, inside
// measured_cycles(), so a deterministic tool can count exactly the cycles:
//   valgrind --tool=callgrind --toggle-collect='*measured_cycles*'
//       build/release/benchmarks/lockon_cycle_probe lock_on 1000
// gives instructions (Ir) and malloc calls per cycle; strace -c -f on two
// runs with different CYCLES gives syscalls per cycle (the difference).
// Without --redis-url it starts a throwaway redis-server (not traced by
// valgrind or strace unless asked).
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bench_support.hpp"
#include "lockon/lockon.hpp"
#include "support/redis_server.hpp"

namespace {

int noop(int, const std::string&, const std::string&) { return 0; }
inline constexpr auto decorated_noop = lockon::decorate<"bench::probe_decorated_noop", 0, 1, 2>(&noop);

// Not inlined: the callgrind toggle needs the symbol.
[[gnu::noinline]] void measured_cycles(const std::function<void()>& cycle, long n) {
  for (long i = 0; i < n; ++i) cycle();
}

}  // namespace

// Defined by support.cpp's registry; the probe only needs the hiredis floor.
namespace lockon::bench {
void set_external_url(std::string url);
void stop_servers();
}  // namespace lockon::bench

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s VARIANT CYCLES [--redis-url=URL]\n", argv[0]);
    return 2;
  }
  const std::string variant = argv[1];
  const long cycles = std::strtol(argv[2], nullptr, 10);
  if (cycles < 0 || cycles > 10'000'000) {
    std::fprintf(stderr, "CYCLES must be 0..10000000\n");
    return 2;
  }
  for (int i = 3; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.rfind("--redis-url=", 0) == 0) lockon::bench::set_external_url(std::string(arg.substr(12)));
  }
  int status = 0;
  try {
    const std::string url = lockon::bench::server_url();
    const lockon::Client client(url);
    lockon::bench::RawFloor floor(url, "bench:probe:floor");
    lockon::Lock lock(client, "bench:probe:lock");
    lockon::Lock fenced(client, "bench:probe:fenced", {.fencing = true});
    lockon::Lock unrecorded(client, "bench:probe:unrecorded", {.holder_record = false});
    const lockon::RedisLocker locker(client, {.key_prefix = "bench"});
    const auto locked_noop = locker.lock_on<0, 1, 2>("bench::noop", &noop);
    lockon::set_default_locker(lockon::RedisLocker(client, {.key_prefix = "bench"}));
    const std::string account = "account-42";
    const std::string currency = "EUR";
    std::function<void()> cycle;
    if (variant == "floor") {
      cycle = [&] { floor.cycle(); };
    } else if (variant == "lock" || variant == "lock_fenced" || variant == "lock_no_holder_record") {
      lockon::Lock& chosen = variant == "lock" ? lock : variant == "lock_fenced" ? fenced : unrecorded;
      cycle = [&chosen] {
        if (!chosen.try_lock()) throw std::runtime_error("lock busy");
        chosen.unlock();
      };
    } else if (variant == "lock_on") {
      cycle = [&] {
        if (locked_noop(7, account, currency) != 0) throw std::runtime_error("lock_on result");
      };
    } else if (variant == "decorated") {
      cycle = [&] {
        if (decorated_noop(7, account, currency) != 0) throw std::runtime_error("decorated result");
      };
    } else {
      throw std::runtime_error("unknown variant " + variant);
    }
    for (int i = 0; i < 50; ++i) cycle();  // warm-up: connections, scripts, caches
    measured_cycles(cycle, cycles);
    lockon::reset_default_locker();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockon_cycle_probe: %s\n", e.what());
    status = 1;
  }
  lockon::bench::stop_servers();
  return status;
}
