// integration/test_hot_path.cpp — the uncontended cycle's shortcuts
// (docs/benchmarks.md, "uncontended hot path") keep the full path's
// behaviour:
// - the release script's "nobody queued" branch deletes exactly what
//   hand_over() on an empty queue deleted (lock, hand-over record, holder
//   record), and any queue key, even of the wrong type, takes the full path;
// - a Lock's token and holder record are rewritten in place at each
//   acquisition: every acquisition still gets a fresh token (also in a forked
//   child using the parent's Lock object) and a record naming it;
// - lock_on encodes a call's arguments into a per-thread buffer recycled
//   from the idle lock it takes: different arguments never share a key;
// - a lease's stop state is made only when lost_token() is first asked for:
//   tokens asked for before, during (from the watchdog's thread) and after
//   a loss all end up stopped;
// - the metrics registry remembers each thread's last function: counts
//   never mix functions, and reset_metrics() racing calls is safe.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <atomic>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"
#include "lockon/metrics.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

class HotPath : public ClientTest {
 protected:
  std::string get(const std::string& name) {
    const auto reply = raw({"GET", name});
    return reply.is_nil() ? std::string() : reply.str;
  }
};

TEST_F(HotPath, ReleaseWithNobodyQueuedDeletesTheLockAndBothRecords) {
  const std::string name = key("fast-release");
  const std::string who = lock_companion_key(name, "who");
  const std::string handed = lock_companion_key(name, "hf");
  const std::string other = key("fast-release-neighbour");
  Lock lock(client(), name, {.ttl = 10s});
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(exists(who)) << "the fast path writes the holder record";
  // A hand-over record left from an earlier hand-over (the full path
  // deleted it on release; so must the shortcut). And an unrelated key that
  // must survive.
  ASSERT_TRUE(raw({"SET", handed, "w1 0", "PX", "10000"}).is("OK"));
  ASSERT_TRUE(raw({"SET", other, "x"}).is("OK"));
  lock.unlock();
  EXPECT_EQ(lock.last_unlock_error(), nullptr);
  EXPECT_FALSE(lock.lost());
  EXPECT_FALSE(exists(name));
  EXPECT_FALSE(exists(who));
  EXPECT_FALSE(exists(handed));
  EXPECT_FALSE(exists(lock_companion_key(name, "q")));
  EXPECT_TRUE(exists(other));
}

TEST_F(HotPath, ReleaseOfAKeyNoLongerOursDeletesNothing) {
  const std::string name = key("fast-release-stolen");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(raw({"SET", name, "someone-else", "PX", "10000"}).is("OK"));
  lock.unlock();
  EXPECT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_TRUE(lock.lost());
  EXPECT_EQ(get(name), "someone-else");
}

TEST_F(HotPath, ReleaseWithAWaiterQueuedHandsOverToIt) {
  const std::string name = key("fast-release-hand-over");
  const std::string handed = lock_companion_key(name, "hf");
  Lock holder(client(), name, {.ttl = 10s});
  // Polling slower than the wait: only the release's hand-over can give the
  // waiter the lock in time (a release that just deleted the key would not).
  Lock waiter(client(), name, {.ttl = 10s, .wait_poll_interval = 5s});
  ASSERT_TRUE(holder.try_lock());
  std::atomic<bool> acquired{false};
  std::thread wait([&] { acquired = waiter.try_lock_for(3s); });
  const bool queued = eventually(2000ms, [&] { return exists(lock_companion_key(name, "q")); });
  holder.unlock();
  wait.join();
  ASSERT_TRUE(queued) << "the waiter never queued";
  EXPECT_EQ(holder.last_unlock_error(), nullptr);
  ASSERT_TRUE(acquired) << "the release did not hand the lock over";
  EXPECT_TRUE(waiter.owned());
  // The hand-over's record ("<waiter id> <fence>") and the holder record
  // moved to the waiter; its queue entry is gone.
  EXPECT_TRUE(exists(handed)) << "acquired without a hand-over";
  EXPECT_TRUE(exists(lock_companion_key(name, "who")));
  EXPECT_FALSE(exists(lock_companion_key(name, "q")));
  waiter.unlock();
  EXPECT_FALSE(exists(name));
  EXPECT_FALSE(exists(handed));
}

TEST_F(HotPath, AQueueKeyOfTheWrongTypeTakesTheFullPathAndFailsTheRelease) {
  const std::string name = key("fast-release-wrongtype");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  // Not a list: the shortcut must not treat it as "nobody queued" and
  // delete the lock; the full path's LPOP reports WRONGTYPE, as before.
  ASSERT_TRUE(raw({"SET", lock_companion_key(name, "q"), "not-a-list", "PX", "10000"}).is("OK"));
  lock.unlock();
  ASSERT_NE(lock.last_unlock_error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(lock.last_unlock_error()), WrongTypeError);
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(exists(name)) << "the shortcut deleted a lock whose queue it could not read";
  raw({"DEL", lock_companion_key(name, "q"), name});
}

TEST_F(HotPath, EveryAcquisitionOfOneLockObjectGetsAFreshTokenAndItsOwnRecord) {
  const std::string name = key("fresh-tokens");
  const std::string who = lock_companion_key(name, "who");
  Lock lock(client(), name, {.ttl = 10s});
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(lock.try_lock());
    const std::string token = get(name);
    ASSERT_TRUE(is_lock_token(token)) << "'" << token << "'";
    EXPECT_TRUE(seen.insert(token).second) << "token reused at acquisition " << i;
    EXPECT_EQ(token_nonce(token), token_nonce(*seen.begin())) << "one process, one nonce";
    const std::string record = get(who);
    EXPECT_EQ(record.substr(0, 9), token.substr(0, 8) + "|") << "the record names another acquisition";
    EXPECT_NE(record.find('|' + std::to_string(::getpid()) + '|'), std::string::npos);
    lock.unlock();
    ASSERT_EQ(lock.last_unlock_error(), nullptr);
  }
  EXPECT_EQ(seen.size(), 200u);
}

TEST_F(HotPath, AForkedChildUsingTheParentsLockObjectDrawsOtherTokens) {
  const std::string name = key("fork-tokens");
  const std::string who = lock_companion_key(name, "who");
  Lock lock(client(), name, {.ttl = 10s});
  ASSERT_TRUE(lock.try_lock());  // token buffer, random block and record built before fork
  lock.unlock();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      Client child_client(server().url());
      if (!lock.try_lock()) std::_Exit(10);
      const std::string token = child_client.command({"GET", name}).as_string();
      const std::string record = child_client.command({"GET", who}).as_string();
      if (record.find('|' + std::to_string(::getpid()) + '|') == std::string::npos) code = 11;
      if (::write(fds[1], token.data(), token.size()) != static_cast<ssize_t>(token.size())) code = 12;
      lock.unlock();
      if (lock.last_unlock_error() != nullptr) code = 13;
    } catch (...) {
      code = 14;
    }
    std::_Exit(code);
  }
  ASSERT_GT(pid, 0);
  ::close(fds[1]);
  int status = -1;
  const bool ended = eventually(10000ms, [&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  char buffer[64] = {};
  const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
  ::close(fds[0]);
  ASSERT_TRUE(ended) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed check " << WEXITSTATUS(status);
  ASSERT_EQ(n, 45);
  const std::string child_token(buffer, 45);
  ASSERT_TRUE(lock.try_lock());
  const std::string parent_token = get(name);
  lock.unlock();
  EXPECT_TRUE(is_lock_token(child_token)) << child_token;
  EXPECT_NE(child_token, parent_token) << "parent and child drew the same token after fork";
  // The child is another process: its waiters must not take the parent's
  // holds for their own (scripts::wait_attempt).
  EXPECT_NE(token_nonce(child_token), token_nonce(parent_token)) << "the child kept its parent's process nonce";
}

// The encoding buffer is recycled from the idle lock of the previous call;
// arguments whose encodings are prefixes of each other, longer then shorter,
// alternating on one thread and across threads, must each lock their own key.
TEST_F(HotPath, RecycledEncodingBuffersNeverMakeTwoArgumentsShareAKey) {
  const std::string prefix = key("encode-buffer");
  const RedisLocker locker(client(), {.key_prefix = prefix});
  const auto locked = locker.lock_on<0, 1>("hot::encode", [](LockContext& context, const std::string&, int) {
    return context.key();
  });
  const std::vector<std::pair<std::string, int>> calls{
      {"account-0000000000000000000000000000000042", 7}, {"a", 7}, {"ab", 7}, {"a", 70000}, {"", 0},
      {"account-0000000000000000000000000000000042", 7}, {"a", -7}, {std::string(300, 'x'), 1}, {"a", 7}};
  std::set<std::string> keys;
  for (int round = 0; round < 3; ++round) {
    for (const auto& [text, number] : calls) {
      const std::string expected = locker.key_for<0, 1>("hot::encode", text, number);
      EXPECT_EQ(locked(text, number), expected) << "'" << text.substr(0, 20) << "', " << number;
      keys.insert(expected);
    }
  }
  EXPECT_EQ(keys.size(), 7u);  // 9 calls, two of them repeated
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const auto& [text, number] = calls[static_cast<std::size_t>(i + t) % calls.size()];
        try {
          if (locked(text, number + t * 1000) != locker.key_for<0, 1>("hot::encode", text, number + t * 1000)) ++wrong;
        } catch (...) {
          ++wrong;  // each thread has its own numbers: its keys are never busy
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

std::uint64_t acquisitions_of(const std::string& function) {
  for (const auto& m : metrics_snapshot())
    if (m.function == function) return m.acquisitions;
  return 0;
}

bool listed(const std::string& function) {
  for (const auto& m : metrics_snapshot())
    if (m.function == function) return true;
  return false;
}

TEST_F(HotPath, MetricsOfFunctionsCalledInTurnOnOneThreadStaySeparate) {
  const RedisLocker locker(client(), {.key_prefix = key("metrics-turns")});
  // Names that share a prefix: a cache comparing too little would merge them.
  const std::string a = key("hot::metrics");
  const std::string b = a + "2";
  const auto locked_a = locker.lock_on<0>(a, [](int x) { return x; });
  const auto locked_b = locker.lock_on<0>(b, [](int x) { return x; });
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(locked_a(i), i);
    if (i % 3 == 0) {
      ASSERT_EQ(locked_b(i), i);
    }
  }
  EXPECT_EQ(acquisitions_of(a), 30u);
  EXPECT_EQ(acquisitions_of(b), 10u);
  // After a reset the thread's remembered counters are not used again.
  reset_metrics();
  EXPECT_FALSE(listed(a));
  ASSERT_EQ(locked_a(1), 1);
  ASSERT_EQ(locked_a(2), 2);
  EXPECT_EQ(acquisitions_of(a), 2u);
  EXPECT_FALSE(listed(b));
  // Sub-millisecond holds fill every cumulative bucket, as before.
  for (const auto& m : metrics_snapshot()) {
    if (m.function != a) continue;
    EXPECT_EQ(m.hold.count, 2u);
    for (std::size_t i = 1; i < m.hold.buckets.size(); ++i) EXPECT_LE(m.hold.buckets[i - 1], m.hold.buckets[i]);
    EXPECT_EQ(m.hold.buckets.back(), m.hold.count) << "a hold longer than 10 s?";
  }
}

TEST_F(HotPath, ResettingMetricsWhileOtherThreadsRecordIsSafe) {
  const RedisLocker locker(client(), {.key_prefix = key("metrics-race")});
  const std::string name = key("hot::metrics-race");
  const auto locked = locker.lock_on<0>(name, [](int x) { return x; });
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300 && !stop; ++i) {
        if (locked(t * 1000 + i) == t * 1000 + i) ++calls;
      }
    });
  }
  for (int i = 0; i < 200 && calls.load() < 900; ++i) {
    reset_metrics();
    std::this_thread::sleep_for(1ms);
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  reset_metrics();
  ASSERT_EQ(locked(5), 5);
  EXPECT_EQ(acquisitions_of(name), 1u);
  EXPECT_GT(calls.load(), 0);
}

TEST_F(HotPath, LostTokensAskedBeforeAndAfterALossAreStopped) {
  const std::string name = key("lazy-stop");
  Lock lock(client(), name, {.ttl = 10s, .auto_renew = false});
  ASSERT_TRUE(lock.try_lock());
  const std::stop_token before = lock.lost_token();
  ASSERT_TRUE(before.stop_possible());
  EXPECT_FALSE(before.stop_requested());
  // A stop callback that asks for a token itself must not deadlock.
  std::atomic<bool> inner_stopped{false};
  const std::stop_callback callback(before, [&] { inner_stopped = lock.lost_token().stop_requested(); });
  ASSERT_TRUE(raw({"SET", name, "someone-else", "PX", "10000"}).is("OK"));
  lock.unlock();  // finds the key taken: declares the lease lost
  EXPECT_TRUE(lock.lost());
  EXPECT_TRUE(before.stop_requested());
  EXPECT_TRUE(inner_stopped.load());
  EXPECT_TRUE(lock.lost_token().stop_requested()) << "a token asked for after the loss";
  // Never asked for during the acquisition: still stopped when asked late.
  raw({"DEL", name});
  ASSERT_TRUE(lock.try_lock());
  ASSERT_TRUE(raw({"SET", name, "someone-else", "PX", "10000"}).is("OK"));
  lock.unlock();
  EXPECT_TRUE(lock.lost_token().stop_requested());
  // The next acquisition has its own, unstopped token.
  raw({"DEL", name});
  ASSERT_TRUE(lock.try_lock());
  const std::stop_token fresh = lock.lost_token();
  EXPECT_TRUE(fresh.stop_possible());
  EXPECT_FALSE(fresh.stop_requested());
  EXPECT_TRUE(before.stop_requested());
  lock.unlock();
  EXPECT_FALSE(fresh.stop_requested());
}

TEST_F(HotPath, LostTokensAskedWhileTheWatchdogDeclaresTheLossAreStopped) {
  for (int round = 0; round < 5; ++round) {
    const std::string name = key("lazy-stop-race");
    Lock lock(client(), name, {.ttl = 150ms});  // renewed every 50 ms
    ASSERT_TRUE(lock.try_lock());
    ASSERT_TRUE(raw({"SET", name, "someone-else", "PX", "10000"}).is("OK"));
    // The renewal thread finds the key taken and declares the loss while
    // this thread keeps asking for tokens (a first one made each round).
    // The first thousand are kept, then only the latest.
    std::vector<std::stop_token> tokens;
    std::stop_token latest;
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < 100'000'000 && std::chrono::steady_clock::now() - start < 2s; ++i) {
      latest = lock.lost_token();
      if (tokens.size() < 1000) tokens.push_back(latest);
      if (latest.stop_requested()) break;
    }
    ASSERT_TRUE(latest.stop_requested()) << "the loss was never signalled";
    EXPECT_TRUE(lock.lost());
    for (const auto& token : tokens) EXPECT_TRUE(token.stop_requested());
    lock.unlock();
  }
}

}  // namespace
}  // namespace lockon::test
