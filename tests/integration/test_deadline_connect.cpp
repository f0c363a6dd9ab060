// integration/test_deadline_connect.cpp — a timed acquisition whose
// connection must be (re)opened while the server cannot accept it: the
// caller's deadline bounds the TCP connect and the wait for a pooled
// connection, not only the reads. Found in session 17: with
// auto_pipeline=0, try_lock_for(2 ms) against a stalled server whose accept
// queue was full (every timed-out attempt reconnects) took 1,000 ms, the
// connect timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/multi_lock.hpp"
#include "support/fault_proxy.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Non-blocking connects to 127.0.0.1:port, left open: they fill the
// listener's accept queue while nobody accepts.
std::vector<int> fill_accept_queue(int port, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
    fds.push_back(fd);
  }
  return fds;
}

class DeadlineConnect : public ::testing::TestWithParam<bool> {};

TEST_P(DeadlineConnect, ATimedAcquisitionReturnsByItsDeadlineWhileTheServerCannotAccept) {
  const bool pooled = GetParam();
  RedisServer own(ServerOptions{.extra_args = {"--tcp-backlog", "1"}});
  const Client client(own.url() + "?connect_timeout=3000" + (pooled ? "&auto_pipeline=0" : ""));
  own.pause();  // accepts nothing; the kernel queues at most a couple of connections
  const std::vector<int> queued = fill_accept_queue(own.port(), 16);
  std::this_thread::sleep_for(50ms);
  Lock lock(client, "k", {.ttl = 5s});
  const auto start = Clock::now();
  bool acquired = true;
  std::string error;
  try {
    acquired = lock.try_lock_for(100ms);
  } catch (const Error& e) {
    acquired = false;
    error = e.what();
  }
  const long long took = ms_since(start);
  own.resume();
  for (const int fd : queued) ::close(fd);
  EXPECT_FALSE(acquired);
  EXPECT_LT(took, 100 + 150) << (pooled ? "pool" : "shared connection") << ": try_lock_for(100 ms) took " << took
                             << " ms (connect timeout 3,000 ms)" << (error.empty() ? "" : ": " + error);
  // Usable once the server accepts again.
  bool later = false;
  EXPECT_NO_THROW(later = lock.try_lock_for(3s));
  EXPECT_TRUE(later);
  if (lock.held()) lock.unlock();
}

// MultiLock's single script (every key on one server): its connect was
// bounded by connect_timeout only (found by review, session 18).
TEST(DeadlineConnectMulti, ATimedMultiLockReturnsByItsDeadlineWhileTheServerCannotAccept) {
  RedisServer own(ServerOptions{.extra_args = {"--tcp-backlog", "1"}});
  const Client client(own.url() + "?connect_timeout=3000");
  own.pause();
  const std::vector<int> queued = fill_accept_queue(own.port(), 16);
  std::this_thread::sleep_for(50ms);
  MultiLock both(client, {"{k}a", "{k}b"}, {.ttl = 5s});
  const auto start = Clock::now();
  bool acquired = true;
  std::string error;
  try {
    acquired = both.try_lock_for(100ms);
  } catch (const Error& e) {
    acquired = false;
    error = e.what();
  }
  const long long took = ms_since(start);
  own.resume();
  for (const int fd : queued) ::close(fd);
  EXPECT_FALSE(acquired);
  EXPECT_LT(took, 100 + 150) << "MultiLock::try_lock_for(100 ms) took " << took << " ms (connect timeout 3,000 ms)"
                             << (error.empty() ? "" : ": " + error);
  bool later = false;
  EXPECT_NO_THROW(later = both.try_lock_for(3s));
  EXPECT_TRUE(later);
  if (both.held()) both.unlock();
}

// Sentinel: the master is resolved on the first request, and a sentinel
// that answers nothing held try_lock_for(100 ms) for a whole resolution
// step (connect + socket timeout, 2 s by default; found by review, session
// 18). Later callers waiting for a resolution in progress are bounded the
// same way.
TEST(DeadlineSentinel, ASilentSentinelDoesNotHoldATimedAcquisitionPastItsDeadline) {
  RedisServer stand_in;  // what the proxy would forward to; it forwards nothing
  FaultProxy sentinel(stand_in.host(), stand_in.port());
  sentinel.blackhole(true);
  const Client client("redis-sentinel://127.0.0.1:" + std::to_string(sentinel.port()) + "#mymaster");
  Lock lock(client, "sentinel-deadline:lock", {.ttl = 5s});
  for (int round = 0; round < 2; ++round) {
    const auto start = Clock::now();
    bool acquired = true;
    std::string error;
    try {
      acquired = lock.try_lock_for(100ms);
    } catch (const Error& e) {
      acquired = false;
      error = e.what();
    }
    const long long took = ms_since(start);
    EXPECT_FALSE(acquired);
    EXPECT_LT(took, 100 + 250) << "round " << round << ": try_lock_for(100 ms) took " << took
                               << " ms (a resolution step is 2,000 ms)" << (error.empty() ? "" : ": " + error);
  }
}

INSTANTIATE_TEST_SUITE_P(PoolOrShared, DeadlineConnect, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "pool" : "shared"; });

}  // namespace
}  // namespace lockon::test
