// integration/test_fork.cpp — a process that forks after using lockon: the
// child gets working, independent lockon state (its own sockets and renewal
// threads), does not hold what the parent acquired, and cannot disturb the
// parent's connections or leases.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class Fork : public ClientTest {};

// Child exit codes: 0 = every check passed; others name the failed check.
enum ChildFailure : int {
  kParentLockHeld = 10,
  kChildLockNotAcquired,
  kChildLeaseLapsed,
  kChildLockLost,
  kWrongReply,
  kChildLockNotReleased,
  kLockedCallFailed,
  kException,
  kHolderRecordNotTheChilds,
};

// Runs in the child: only _exit, never returns into GoogleTest.
[[noreturn]] void child_main(Client& client, RedisLocker& locker, Lock& parent_lock, const std::string& child_key) {
  int status = 0;
  try {
    if (parent_lock.held()) std::_Exit(kParentLockHeld);
    parent_lock.unlock();  // must neither release nor wait on the parent's renewal
    Lock child_lock(client, child_key, {.ttl = 300ms});
    if (!child_lock.try_lock()) std::_Exit(kChildLockNotAcquired);
    // The holder record names the child, not the parent whose record the
    // same thread built before fork() (it is cached per fork generation).
    const Reply who = client.command({"GET", lock_companion_key(child_key, "who")});
    if (who.is_nil() || who.as_string().find('|' + std::to_string(::getpid()) + '|') == std::string::npos)
      std::_Exit(kHolderRecordNotTheChilds);
    const auto start = Clock::now();
    for (int i = 0; Clock::now() - start < 1000ms; ++i) {  // over three TTLs, ~9 renewals
      const std::string tag = "child-" + std::to_string(i);
      if (client.command({"ECHO", tag}).as_string() != tag) std::_Exit(kWrongReply);
      if (client.command({"PTTL", child_key}).as_integer() <= 0) std::_Exit(kChildLeaseLapsed);
      if (child_lock.lost()) std::_Exit(kChildLockLost);
      std::this_thread::sleep_for(20ms);
    }
    child_lock.unlock();
    if (client.command({"EXISTS", child_key}).as_integer() != 0) std::_Exit(kChildLockNotReleased);
    // The parent's RedisLocker, held over several renewals of its lease.
    auto locked = locker.lock_on<0>("fork::child", [&](const std::string& key) {
      std::this_thread::sleep_for(400ms);
      return client.command({"ECHO", key}).as_string();
    });
    if (locked(child_key) != child_key) status = kLockedCallFailed;
  } catch (...) {
    status = kException;
  }
  std::_Exit(status);
}

TEST_F(Fork, ChildHasIndependentWorkingStateAndLeavesTheParentsLockAlone) {
  const std::string parent_key = key("parent");
  const std::string child_key = key("child");
  RedisLocker locker(client(), {.ttl = 300ms});
  auto warm = locker.lock_on<0>("fork::parent", [](int x) { return x; });
  ASSERT_EQ(warm(1), 1);  // the locker's pool and cache are in use before fork
  Lock parent_lock(client(), parent_key, {.ttl = 300ms});
  ASSERT_TRUE(parent_lock.try_lock());
  ASSERT_EQ(client().command({"ECHO", "warm"}).as_string(), "warm");

  // The parent keeps using the same Client from a thread across the fork.
  std::atomic<bool> stop{false};
  std::atomic<int> wrong_replies{0};
  std::atomic<int> parent_calls{0};
  std::jthread parent_user([&] {
    for (int i = 0; !stop && i < 100000; ++i) {
      const std::string tag = "parent-" + std::to_string(i);
      try {
        if (client().command({"ECHO", tag}).as_string() != tag) ++wrong_replies;
      } catch (...) {
        ++wrong_replies;
      }
      ++parent_calls;
      std::this_thread::sleep_for(2ms);
    }
  });

  const pid_t pid = ::fork();
  if (pid == 0) child_main(client(), locker, parent_lock, child_key);
  ASSERT_GT(pid, 0);
  int status = -1;
  const bool ended = eventually(10000ms, [&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  stop = true;
  parent_user.join();

  ASSERT_TRUE(ended) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child failed check " << WEXITSTATUS(status);
  EXPECT_EQ(wrong_replies.load(), 0);
  EXPECT_GT(parent_calls.load(), 0);
  // The parent's lease outlived the child and is still renewed and owned.
  EXPECT_TRUE(parent_lock.held());
  EXPECT_FALSE(parent_lock.lost());
  EXPECT_GT(pttl(parent_key), 0);
  parent_lock.unlock();
  EXPECT_EQ(parent_lock.last_unlock_error(), nullptr) << "the parent's lock was no longer owned";
  EXPECT_FALSE(exists(parent_key));
}

// A queue place kept across fork() (keep_queue_place) is the parent's: the
// child must neither continue from it (the parent's hand-over would make
// both holders) nor give it up (cancelling the parent's entry hands the
// parent's lock on). Found by reading the code (session 17): the child's
// try_lock_for took the parent's hand-over.
TEST_F(Fork, AQueuePlaceKeptAcrossForkStaysTheParents) {
  const std::string name = key("queued");
  Lock holder(client(), name, {.ttl = 10s});
  ASSERT_TRUE(holder.try_lock());
  Lock waiter(client(), name, {.ttl = 10s, .wait_poll_interval = 50ms, .keep_queue_place = true});
  ASSERT_FALSE(waiter.try_lock_for(100ms));  // queued; the place is kept
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The parent hands the key to the kept place and takes it meanwhile.
    std::this_thread::sleep_for(400ms);
    int code = 0;
    try {
      if (waiter.try_lock_for(500ms)) code = 1;  // the parent's hand-over, or its lock
      waiter.abandon_wait();                     // must not cancel the parent's entry
    } catch (...) {
      code = 2;
    }
    std::_Exit(code);
  }
  ASSERT_GT(pid, 0);
  holder.unlock();  // handed to the kept place
  const bool acquired = waiter.try_lock_for(3s);
  int status = -1;
  const bool ended = eventually(10000ms, [&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(ended) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << (WEXITSTATUS(status) == 1 ? "the child acquired the parent's lock"
                                                                  : "the child threw");
  ASSERT_TRUE(acquired) << "the parent did not get the hand-over to its kept place";
  EXPECT_TRUE(waiter.owned()) << "the child's abandon_wait handed the parent's lock on";
  EXPECT_FALSE(waiter.lost());
  waiter.unlock();
  EXPECT_EQ(waiter.last_unlock_error(), nullptr);
}

}  // namespace
}  // namespace lockon::test
