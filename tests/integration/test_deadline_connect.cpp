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

// `server` paused with its accept queue full, for the scope: it accepts
// nothing (the kernel queues at most a couple of connections).
class AcceptingNothing {
 public:
  explicit AcceptingNothing(RedisServer& server) : server_(server) {
    server_.pause();
    queued_ = fill_accept_queue(server_.port(), 16);
    std::this_thread::sleep_for(50ms);
  }
  ~AcceptingNothing() {
    server_.resume();
    for (const int fd : queued_) ::close(fd);
  }
  AcceptingNothing(const AcceptingNothing&) = delete;
  AcceptingNothing& operator=(const AcceptingNothing&) = delete;

 private:
  RedisServer& server_;
  std::vector<int> queued_;
};

// One try_lock_for(100 ms), timed; an Error counts as not acquired (its
// text kept for the failure message).
struct TimedAttempt {
  bool acquired = true;
  long long took = 0;
  std::string error;
  std::string said() const { return error.empty() ? "" : ": " + error; }
};
TimedAttempt try_for_100ms(DistributedLock& lock) {
  TimedAttempt attempt;
  const auto start = Clock::now();
  try {
    attempt.acquired = lock.try_lock_for(100ms);
  } catch (const Error& e) {
    attempt.acquired = false;
    attempt.error = e.what();
  }
  attempt.took = ms_since(start);
  return attempt;
}

// Usable once the server accepts again.
void expect_usable(DistributedLock& lock) {
  bool later = false;
  EXPECT_NO_THROW(later = lock.try_lock_for(3s));
  EXPECT_TRUE(later);
  if (lock.held()) lock.unlock();
}

class DeadlineConnect : public ::testing::TestWithParam<bool> {};

TEST_P(DeadlineConnect, ATimedAcquisitionReturnsByItsDeadlineWhileTheServerCannotAccept) {
  const bool pooled = GetParam();
  RedisServer own(ServerOptions{.extra_args = {"--tcp-backlog", "1"}});
  const Client client(own.url() + "?connect_timeout=3000" + (pooled ? "&auto_pipeline=0" : ""));
  Lock lock(client, "k", {.ttl = 5s});
  TimedAttempt attempt;
  {
    const AcceptingNothing stalled(own);
    attempt = try_for_100ms(lock);
  }
  EXPECT_FALSE(attempt.acquired);
  EXPECT_LT(attempt.took, 100 + 150) << (pooled ? "pool" : "shared connection") << ": try_lock_for(100 ms) took "
                                     << attempt.took << " ms (connect timeout 3,000 ms)" << attempt.said();
  expect_usable(lock);
}

// MultiLock's single script (every key on one server): its connect was
// bounded by connect_timeout only (found by review, session 18).
TEST(DeadlineConnectMulti, ATimedMultiLockReturnsByItsDeadlineWhileTheServerCannotAccept) {
  RedisServer own(ServerOptions{.extra_args = {"--tcp-backlog", "1"}});
  const Client client(own.url() + "?connect_timeout=3000");
  MultiLock both(client, {"{k}a", "{k}b"}, {.ttl = 5s});
  TimedAttempt attempt;
  {
    const AcceptingNothing stalled(own);
    attempt = try_for_100ms(both);
  }
  EXPECT_FALSE(attempt.acquired);
  EXPECT_LT(attempt.took, 100 + 150) << "MultiLock::try_lock_for(100 ms) took " << attempt.took
                                     << " ms (connect timeout 3,000 ms)" << attempt.said();
  expect_usable(both);
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
    const TimedAttempt attempt = try_for_100ms(lock);
    EXPECT_FALSE(attempt.acquired);
    EXPECT_LT(attempt.took, 100 + 250) << "round " << round << ": try_lock_for(100 ms) took " << attempt.took
                                       << " ms (a resolution step is 2,000 ms)" << attempt.said();
  }
}

INSTANTIATE_TEST_SUITE_P(PoolOrShared, DeadlineConnect, ::testing::Bool(),
                         [](const auto& param_info) { return param_info.param ? "pool" : "shared"; });

}  // namespace
}  // namespace lockon::test
