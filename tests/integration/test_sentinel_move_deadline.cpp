// integration/test_sentinel_move_deadline.cpp — a timed wait that follows a
// Sentinel failover ends by its deadline, even when the new master is slow
// to answer the move of its queue entry (an open finding of session 20).
//
// What it attacks: W waits (try_lock_until) behind H on the first master
// M1. SENTINEL FAILOVER promotes M2; W's client follows the switch, and W
// moves its queue entry to M2, renamed for M2's subscriber
// (scripts::move_wait: SharedHolder::wait_for_turn, Lock::Impl::move_wait).
// M2 answers that one script late: the sentinels name M2 at the port of a
// FaultProxy in front of it (replica-announce-port), which holds the move
// back kMoveHeld, longer than the client's socket timeout (kSocketTimeout).
// W's deadline comes a few seconds after the move is sent.
//
// How each failed before the fix: the move was sent 1.26 s into W's 8 s
// wait, and W's call returned only when the 10 s socket timeout ended the
// move's read, 3,311 to 3,320 ms past its deadline, with a TimeoutError
// ("move wait on …: timed out waiting for the reply") instead of false:
//  - a ReadWriteLock/Semaphore read the move's reply with no deadline at all
//    (run_script(..., time_point::max())): SharedWaitMovingWithTheScript…,
//    where the new master already knows the script;
//  - every wait, the Lock's too, read the EVAL that follows a NOSCRIPT by
//    the socket timeout only (resolve_noscript). A new master's script
//    cache is empty, so after a failover that is the move's usual path:
//    SharedWaitMovingToASlowNewMaster…, LockWaitMovingToASlowNewMaster….
//
// What giving up must leave: the held-back move runs after W gave up (the
// proxy forwards it then), and renames W's old entry if that is still
// queued. Once it ran, no entry of W's is queued, and when H releases,
// another client takes the lock at once. Before the fix (on 7609aa2) the
// Lock left W's entry queued there: its give-up cancelled only the new
// entry, and the late move renamed the old one into it ~5.3 s after the
// give-up, past the clean-up's last sweep (at 1 s then; at 5 s since
// e9648a4, which a move held back a little longer passes too). A queue
// place nobody waits in: a release hands K to it if W's process listens
// on that channel for another waiter (by reasoning), and K is then held by
// nobody for its TTL.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "support/fixtures.hpp"
#include "client/script.hpp"
#include "integration/sentinel_failover_support.hpp"
#include "protocol/lock_scripts.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/read_write_lock.hpp"
#include "support/fault_proxy.hpp"
#include "support/sentinel_fixture.hpp"
#include "support/steady_time.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kSocketTimeout = 10s;
// W's whole wait: enough to queue, and for the failover and W's switch to
// come well before its end (about 3 s in; checked below).
constexpr auto kWait = 8s;
// Longer than the socket timeout: the move's reply never came in time on
// the code before the fix either.
constexpr auto kMoveHeld = 12s;
// Past the deadline: one read that ends at it, then two cancels of at most
// kCancelGrace (25 ms) each; the rest is a loaded machine's scheduling.
constexpr auto kAllowedOverrun = 500ms;

const std::string kQuery = "?connect_timeout=300&socket_timeout=" +
                           std::to_string(std::chrono::milliseconds(kSocketTimeout).count());
const std::string kMoveDeadlineKey = "move_deadline:lock";

enum class MoveScript { new_to_the_master, cached };

RawReply queue_of(RedisServer& server, const std::string& queue) {
  try {
    return server.command({"LRANGE", queue, "0", "-1"});
  } catch (const std::exception& e) {
    RawReply failed;
    failed.type = RawReply::Type::error;
    failed.str = e.what();
    return failed;
  }
}

// One exclusive holder of kMoveDeadlineKey of either kind.
class Holder {
 public:
  Holder(ExclusiveKind kind, Client& client) : kind_(kind) {
    LockOptions lock_options;
    lock_options.ttl = 60s;
    ReadWriteLockOptions rw_options;
    rw_options.ttl = 60s;
    if (kind_ == ExclusiveKind::lock) lock_.emplace(client, kMoveDeadlineKey, lock_options);
    else rw_.emplace(client, kMoveDeadlineKey, rw_options);
  }
  bool try_lock() { return kind_ == ExclusiveKind::lock ? lock_->try_lock() : rw_->try_lock(); }
  bool try_lock_until(Clock::time_point deadline) {
    return kind_ == ExclusiveKind::lock ? lock_->try_lock_until(deadline) : rw_->try_lock_until(deadline);
  }
  // The release's error, if any.
  std::exception_ptr unlock() {
    if (kind_ == ExclusiveKind::lock) {
      lock_->unlock();
      return lock_->last_unlock_error();
    }
    rw_->unlock();
    return rw_->last_unlock_error();
  }

 private:
  ExclusiveKind kind_;
  std::optional<Lock> lock_;
  std::optional<ReadWriteLock> rw_;
};

void move_deadline_scenario(ExclusiveKind kind, MoveScript move_script) {
  std::unique_ptr<FaultProxy> m2_proxy;
  SentinelSet set(SentinelSetOptions{.replica_announced_port = [&](RedisServer& replica) {
    m2_proxy = std::make_unique<FaultProxy>(replica.host(), replica.port());
    return m2_proxy->port();
  }});
  const int old_port = set.master_port_by_sentinel();
  ASSERT_EQ(old_port, set.master().port());
  RedisServer& m1 = set.master();
  RedisServer& m2 = set.replica();  // talked to directly here; W through m2_proxy
  const std::string queue = detail::companion_key(kMoveDeadlineKey, kind == ExclusiveKind::lock ? "q" : "sq");

  // The move, held back on its way to M2 (once), as EVALSHA or, after a
  // NOSCRIPT, as EVAL.
  const auto& move_wait = detail::scripts::move_wait();
  if (move_script == MoveScript::cached) {
    ASSERT_TRUE(m2.command({"SCRIPT", "LOAD", move_wait.body()}).is(move_wait.sha()));
  }
  const int held_by_sha = m2_proxy->add_rule({.command = "EVALSHA",
                                              .argument_contains = move_wait.sha(),
                                              .action = FaultAction::delay,
                                              .delay = kMoveHeld,
                                              .times = 1});
  const int held_body = m2_proxy->add_rule({.command = "EVAL",
                                            .argument_contains = move_wait.body(),
                                            .action = FaultAction::delay,
                                            .delay = kMoveHeld,
                                            .times = 1});
  if (move_script == MoveScript::new_to_the_master) m2_proxy->remove_rule(held_by_sha);  // NOSCRIPT at once
  const auto moves_held = [&] { return m2_proxy->matched(held_by_sha) + m2_proxy->matched(held_body); };

  // H holds kMoveDeadlineKey on M1 for a long lease.
  Client h_client(set.url(kQuery));
  Holder h(kind, h_client);
  ASSERT_TRUE(h.try_lock());

  // W waits behind H, on M1, until its deadline.
  Client w_client(set.url(kQuery));
  Holder w(kind, w_client);
  std::atomic<bool> w_done{false};
  bool w_got = false;
  std::string w_error;
  const auto w_started = Clock::now();
  const auto w_deadline = w_started + kWait;
  Clock::time_point w_returned{};
  std::thread w_thread([&] {
    try {
      w_got = w.try_lock_until(w_deadline);
    } catch (const std::exception& e) {
      w_error = e.what();
    }
    w_returned = Clock::now();
    w_done = true;
  });
  struct Join {
    std::thread& thread;
    ~Join() {
      if (thread.joinable()) thread.join();
    }
  } join{w_thread};
  ASSERT_TRUE(eventually(3s, [&] { return queue_of(m1, queue).elements.size() == 1; })) << "W did not queue on M1";
  ASSERT_TRUE(eventually(3s, [&] { return queue_of(m2, queue).elements.size() == 1; }))
      << "W's entry did not reach the replica";

  // The failover; W's move to M2 is then held back by the proxy.
  ASSERT_TRUE(set.sentinel_command({"SENTINEL", "FAILOVER", SentinelSet::kMasterName}).is("OK"));
  Clock::time_point moved_at{};
  while (!w_done.load() && Clock::now() < w_deadline) {
    if (moves_held() > 0) {
      moved_at = Clock::now();
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  w_thread.join();
  std::printf("[move-deadline] queued on M2 when W returned: %s\n", queue_of(m2, queue).to_string().c_str());
  std::printf(
      "[move-deadline] move sent at +%lld ms, deadline at +%lld ms; W returned at +%lld ms (%lld ms past its "
      "deadline), got=%d, error='%s'\n",
      moved_at == Clock::time_point{} ? -1LL : ms_between(w_started, moved_at), ms_between(w_started, w_deadline),
      ms_between(w_started, w_returned), ms_between(w_deadline, w_returned), w_got, w_error.c_str());
  ASSERT_NE(moved_at, Clock::time_point{})
      << "W sent no move to M2 before its deadline (the failover took too long?): nothing tested\n"
      << set.logs();
  EXPECT_FALSE(w_got) << "W cannot have got what H holds";
  EXPECT_LE(ms_between(w_deadline, w_returned), std::chrono::milliseconds(kAllowedOverrun).count())
      << "W's wait outlasted its deadline by that many ms";
  EXPECT_TRUE(w_error.empty()) << "a wait that reaches its deadline fails with false, not: " << w_error;

  // Once the held-back move has run on M2: nothing of W's is queued there,
  // and H's release goes to another client at once.
  std::this_thread::sleep_until(moved_at + kMoveHeld + 300ms);
  std::printf("[move-deadline] queued on M2 once the move ran: %s\n", queue_of(m2, queue).to_string().c_str());
  const bool queue_empty = eventually(2s, [&] { return queue_of(m2, queue).elements.empty(); });
  EXPECT_TRUE(queue_empty) << "left queued on M2 after W gave up: " << queue_of(m2, queue).to_string();
  ASSERT_FALSE(h.unlock()) << "H's release (on M2) failed";
  Client y_client(set.url(kQuery));
  Holder y(kind, y_client);
  const auto y_started = Clock::now();
  const bool y_got = y.try_lock_until(y_started + 5s);
  std::printf("[move-deadline] after H's release another client got the lock in %lld ms (got=%d)\n",
              ms_between(y_started, Clock::now()), y_got);
  EXPECT_TRUE(y_got) << "the lock stayed held by nobody after W gave up";
  EXPECT_LT(Clock::now() - y_started, 1s) << "the lock was free only after a delay";
  if (y_got) y.unlock();
}

// A ReadWriteLock writer (a Semaphore's permits take the same path:
// shared_holder.cpp). The new master learns the move script from the EVAL
// (the usual case after a failover).
TEST(SentinelMoveDeadline, SharedWaitMovingToASlowNewMasterEndsByItsDeadline) {
  move_deadline_scenario(ExclusiveKind::writer, MoveScript::new_to_the_master);
}

// The same with the script already cached on the new master: the move's
// own EVALSHA is held back.
TEST(SentinelMoveDeadline, SharedWaitMovingWithTheScriptCachedEndsByItsDeadline) {
  move_deadline_scenario(ExclusiveKind::writer, MoveScript::cached);
}

// The blocking Lock: its move was bounded by the deadline already, but not
// the EVAL after the new master's NOSCRIPT.
TEST(SentinelMoveDeadline, LockWaitMovingToASlowNewMasterEndsByItsDeadline) {
  move_deadline_scenario(ExclusiveKind::lock, MoveScript::new_to_the_master);
}

}  // namespace
}  // namespace lockon::test
