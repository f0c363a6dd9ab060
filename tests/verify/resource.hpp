// verify/resource.hpp — the fenced resource of the verification harness.
//
// A separate redis-server (never faulted) plays a storage service that checks
// fencing tokens, per lock key K:
//   hash "res:K": maxfence, holder (of maxfence), value, accepted,
//                 rejected_reads, rejected_writes, conflicts
//   list "res:K:log": "<fence> <holder>" per accepted write, in order.
// Every access (read or write) carries the caller's fence and a holder id
// unique per critical section. An access is refused when its fence is below
// the highest fence seen, or equal to it but from another holder (two
// holders with one fence). Reads are fenced too, so a stale holder cannot
// read, be overtaken, and then write back a value computed from stale data
// (with unfenced reads a fenced write would still lose an update).
// `conflicts` counts writes whose read value was no longer current: a lost
// update the fencing failed to stop. It must stay 0, as must any accepted
// write whose fence is not above the previous accepted writer's.
// Unfenced mechanisms (ReadWriteLock, Semaphore: no fencing tokens) touch
// "unfenced:K" instead (unchecked, not dumped): their exclusion is checked
// from the sections' own times (checker.cpp, check_overlaps).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "lockon/client.hpp"

namespace lockon::verify {

class Resource {
 public:
  Resource(const std::string& url, std::size_t connections);
  /// Fenced read, a sleep of `hold`, then fenced write of read+1. Returns 'A' (write accepted),
  /// 'R' (read or write refused: a newer fence was seen) or 'E' (the
  /// resource server failed — it is never faulted, so this is a harness
  /// problem, reported). Thread-safe.
  char fenced_increment(const std::string& key, std::uint64_t fence, const std::string& holder,
                        std::chrono::microseconds hold) const;
  /// An unfenced section's access: a read, a sleep of `hold`, a write.
  /// Returns 'A', or 'E' if the resource server failed. Thread-safe.
  char unfenced_access(const std::string& key, std::chrono::microseconds hold) const;

 private:
  Client client_;
};

}  // namespace lockon::verify
