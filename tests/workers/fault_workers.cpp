// Worker commands for the fault tests of the shared primitives and MultiLock
// (integration/test_shared_faults.cpp, test_multi_lock_faults.cpp):
//   stall_hold URL NAMES KIND TTL_MS MARKER
//       KIND "read", "write", "permit" (of 1) or "multi" (NAMES comma-
//       separated, a MultiLock). Acquires (waiting), prints "acquired", then
//       ticks every 2 ms (bounded: 30 s). The test SIGSTOPs it; the first tick
//       after a gap longer than TTL_MS/4 prints "resumed lost=0|1" — lost() as
//       seen at once, before any round trip. If it still believes it holds
//       (lost() false) it INCRs MARKER, as a holder acting on the resource.
//       Then it releases with the reporting call and prints
//       "release=ok|not_owned|io|other" and exits 0 (exit 5: never paused).
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/semaphore.hpp"
#include "support/worker_registry.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream in(text);
  for (std::string name; std::getline(in, name, ',');) names.push_back(name);
  return names;
}

// Runs `release`, naming the outcome.
template <class F>
std::string release_outcome(F release) {
  try {
    release();
    return "ok";
  } catch (const lockon::LockNotOwned&) {
    return "not_owned";
  } catch (const lockon::IoError&) {
    return "io";
  } catch (const std::exception& error) {
    return std::string("other(") + error.what() + ")";
  }
}

}  // namespace

LOCKON_WORKER_COMMAND(stall_hold)(const std::vector<std::string>& args) -> int {
  if (args.size() != 5) {
    std::cerr << "usage: stall_hold URL NAMES read|write|permit|multi TTL_MS MARKER\n";
    return 2;
  }
  const lockon::Client client(args[0]);
  const lockon::Client data(args[0]);
  const std::string& kind = args[2];
  const auto ttl = std::chrono::milliseconds(std::stoll(args[3]));
  std::unique_ptr<lockon::ReadWriteLock> rw;
  std::unique_ptr<lockon::Semaphore> sem;
  std::unique_ptr<lockon::MultiLock> multi;
  if (kind == "read" || kind == "write") {
    rw = std::make_unique<lockon::ReadWriteLock>(client, args[1], lockon::ReadWriteLockOptions{.ttl = ttl});
    if (kind == "read") rw->lock_shared();
    else rw->lock();
  } else if (kind == "permit") {
    sem = std::make_unique<lockon::Semaphore>(client, args[1], 1, lockon::SemaphoreOptions{.ttl = ttl});
    sem->acquire();
  } else if (kind == "multi") {
    multi = std::make_unique<lockon::MultiLock>(client, split_names(args[1]), lockon::LockOptions{.ttl = ttl});
    multi->lock();
  } else {
    return 2;
  }
  const auto lost = [&] { return rw ? rw->lost() : sem ? sem->lost() : multi->lost(); };
  // The clock first, then "acquired": the test SIGSTOPs us as soon as it
  // reads it, and a pause before `last` was set would go unseen (the loop
  // then ran its 30 s while the test waited 10: CI's ASan stage, once).
  auto last = Clock::now();
  std::cout << "acquired" << std::endl;
  for (int tick = 0; tick < 15000; ++tick) {
    std::this_thread::sleep_for(2ms);
    const auto now = Clock::now();
    // The test resumes it only after another got in, i.e. after the lease
    // ended: the pause is at least ttl minus one renewal interval (ttl/3).
    if (now - last <= ttl / 4) {
      last = now;
      continue;
    }
    const bool seen_lost = lost();  // first thing after the pause
    std::cout << "resumed lost=" << (seen_lost ? 1 : 0) << std::endl;
    if (!seen_lost) data.command({"INCR", args[4]});
    const std::string outcome = release_outcome([&] {
      if (rw) rw->release();
      else if (sem) sem->release_or_throw();
      else multi->release();
    });
    std::cout << "release=" << outcome << std::endl;
    return 0;
  }
  return 5;
}
