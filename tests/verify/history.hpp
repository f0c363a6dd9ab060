// verify/history.hpp — the records the verification harness writes and reads.
//
// Workers append one line per critical-section attempt to their own log
// ("cs ..." lines, see CsRecord); the nemesis appends one line per injected
// fault ("fault ..." lines, see FaultRecord). Every line is written with a
// single write(2) on an O_APPEND descriptor, so a SIGKILLed worker loses at
// most the record it was about to write, never half a line. Times are
// CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock on Linux), the same
// clock in every process of the machine.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockon::verify {

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One critical-section attempt by one worker thread.
struct CsRecord {
  std::string worker{};     // "<worker id>.<incarnation>"
  int thread = 0;
  long long seq = 0;      // per thread
  std::string mechanism{};  // "lock", "lock_on", "redlock", "rw_write", "rw_read", "sem" (unfenced: fence 0)
  std::string key{};        // the lock key (lock and lock_on share keys)
  std::uint64_t fence = 0;
  std::int64_t start_ns = 0;    // acquisition asked
  std::int64_t acquired_ns = 0; // acquisition returned (success or not)
  std::int64_t release_ns = 0;  // release started (0: never acquired)
  std::int64_t end_ns = 0;      // release returned
  long long deadline_ms = 0;    // the acquire deadline asked
  char write = '-';             // resource write: 'A'ccepted, 'R'ejected, '-' none
  bool lost = false;            // the lock reported its lease lost
  std::string acquire_error = "-";  // error type name, "busy" for a timeout, "-" if acquired
  std::string release_error = "-";  // error type name of release / LockLost, "-" if none
  int server = 0;               // port of the master the section ran on (Sentinel topology), 0 unknown
  // The port the lock's Client sent to just before the acquisition, 0
  // unknown. `server` is asked right after it: a client that switched
  // masters meanwhile (a command that waited on a stopped old master is
  // granted there when it resumes, after the client learnt of the failover)
  // was granted on either; the checker tries both. -1: asked, no answer
  // (the master stopped or dead): granted on any.
  int server_before = 0;
  bool acquired() const { return acquire_error == "-"; }
};

/// One millisecond in the records' nanosecond times.
inline constexpr std::int64_t kMs = 1'000'000;

/// The workload's semaphores have this many permits ("sem" sections).
inline constexpr std::size_t kSemaphorePermits = 2;

/// Mechanisms without fencing tokens (ReadWriteLock, Semaphore): fence 0,
/// no fenced resource; their exclusion is checked from the sections' times.
inline bool is_unfenced(const CsRecord& r) {
  return r.mechanism == "rw_write" || r.mechanism == "rw_read" || r.mechanism == "sem";
}

/// A long hold beginning: written when it starts, so that the checker knows
/// the key was held even if the worker is killed before the section's own
/// record is written.
struct HoldRecord {
  std::string worker{};
  std::string key{};
  std::int64_t acquired_ns = 0;
  std::int64_t planned_end_ns = 0;  // when the section means to release
};

/// One injected fault, written when it ended.
struct FaultRecord {
  std::string type{};    // e.g. "pause_worker", "restart_empty", "proxy_error"
  std::string target{};  // "w3.0", "lock", "node1", ...
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::string detail{};  // free text without spaces, e.g. "READONLY:EVALSHA"
};

std::string format(const CsRecord& record);
std::string format(const FaultRecord& record);
std::string format(const HoldRecord& record);
/// nullopt for a malformed line (counted by the checker, never fatal).
std::optional<CsRecord> parse_cs(std::string_view line);
std::optional<HoldRecord> parse_hold(std::string_view line);
std::optional<FaultRecord> parse_fault(std::string_view line);

/// The short name of a lockon error type ("LockNotOwned", "TimeoutError",
/// ...), "std" for other std::exceptions, "unknown" otherwise.
std::string error_name(const std::exception_ptr& error);

/// Appends whole lines to a file with one write(2) each (thread-safe).
class LineLog {
 public:
  explicit LineLog(const std::string& path);
  ~LineLog();
  LineLog(const LineLog&) = delete;
  LineLog& operator=(const LineLog&) = delete;
  void append(std::string line);

 private:
  int fd_ = -1;
};

/// Splits on single spaces.
std::vector<std::string_view> split(std::string_view line);

}  // namespace lockon::verify
