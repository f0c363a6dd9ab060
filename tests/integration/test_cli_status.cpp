// integration/test_cli_status.cpp — holder records and `lockon status` /
// `lockon list` (issue 17): who holds a lock (host, pid, label), for how
// long, the lease left and fence, the waiters while they wait, --json, the
// record following hand-overs, renewals, release and a SIGKILLed holder.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "support/cli_support.hpp"
#include "support/cluster_fixture.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

class CliStatusHolders : public RedisTest {
 protected:
  bool exists(const std::string& key) { return server().command({"EXISTS", key}).integer == 1; }
  std::string status(const std::string& name) {
    const ProcessResult r = lockon({"status", "--url", server().url(), name});
    EXPECT_TRUE(r.succeeded()) << r.describe();
    return r.out;
  }
};

TEST_F(CliStatusHolders, ShowsTheHolderHeldForLeaseLeftAndFence) {
  const std::string name = key("held");
  Child run = spawn_lockon({"run", "--url", server().url(), "--label", "nightly-backup", "--ttl", "20s",
                            "--fence-env", "F", name, "--", "sh", "-c", "echo ready $$; exec sleep 30"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  std::this_thread::sleep_for(300ms);
  const std::string out = status(name);
  EXPECT_TRUE(contains(out, "  holder: host=" + host_name() + " pid=" + std::to_string(run.pid()) +
                                " label=nightly-backup\n"))
      << out;
  EXPECT_TRUE(contains(out, "  held for: ")) << out;
  EXPECT_TRUE(contains(out, "  lease left: ")) << out;
  EXPECT_TRUE(contains(out, ", fence ")) << out;
  EXPECT_TRUE(contains(out, "  waiters: 0\n")) << out;
  const ProcessResult json = lockon({"status", "--json", "--url", server().url(), name});
  ASSERT_TRUE(json.succeeded()) << json.describe();
  EXPECT_EQ(json.out.front(), '{');
  EXPECT_EQ(json.out.substr(json.out.size() - 2), "}\n");
  EXPECT_TRUE(contains(json.out, "\"pid\":" + std::to_string(run.pid()))) << json.out;
  EXPECT_TRUE(contains(json.out, "\"label\":\"nightly-backup\"")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"held\":true")) << json.out;
  EXPECT_FALSE(contains(json.out, "\"held_for_ms\":null")) << json.out;
  EXPECT_FALSE(contains(json.out, "\"lease_left_ms\":null")) << json.out;
  EXPECT_FALSE(contains(json.out, "\"fence\":null")) << json.out;
  const std::string token = server().command({"GET", name}).str;
  EXPECT_FALSE(contains(json.out, token.substr(0, 8))) << "--json prints no part of the token";
  run.kill(SIGTERM);
  EXPECT_TRUE(run.wait(10s).exit_code != 0 || true);
  EXPECT_TRUE(eventually(5s, [&] { return !exists(lock_companion_key(name, "who")); }))
      << "release deletes the holder record";
}

TEST_F(CliStatusHolders, ShowsWaitersWhileTheyWaitAndTheHandOverUpdatesTheHolder) {
  const std::string name = key("queue");
  auto holder = std::make_unique<Lock>(Client(server().url()), name,
                                       LockOptions{.ttl = 20s, .holder_label = "first \"one\" \\ x"});
  holder->lock();
  Child w1 = spawn_lockon({"run", "--url", server().url(), "--label", "waiter-1", "-w", "20s", name, "--", "sh", "-c",
                           "echo got1; sleep 2"});
  ASSERT_TRUE(eventually(10s, [&] { return contains(status(name), "waiters: 1,"); }));
  std::this_thread::sleep_for(200ms);
  Child w2 = spawn_lockon({"run", "--url", server().url(), "--label", "waiter-2", "-w", "20s", name, "--", "true"});
  ASSERT_TRUE(eventually(10s, [&] { return contains(status(name), "waiters: 2,"); }));
  const std::string out = status(name);
  EXPECT_TRUE(contains(out, "label=first \"one\" \\ x")) << out;
  EXPECT_TRUE(contains(out, "longest wait ")) << out;
  EXPECT_TRUE(contains(out, "    1. host=" + host_name() + " pid=" + std::to_string(w1.pid()) +
                                " label=waiter-1, waiting "))
      << out;
  EXPECT_TRUE(contains(out, "    2. host=" + host_name() + " pid=" + std::to_string(w2.pid()) +
                                " label=waiter-2, waiting "))
      << out;
  const ProcessResult json = lockon({"status", "--json", "--url", server().url(), name});
  EXPECT_TRUE(contains(json.out, "\"label\":\"first \\\"one\\\" \\\\ x\"")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"waiters\":{\"count\":2,\"longest_wait_ms\":")) << json.out;
  EXPECT_TRUE(contains(json.out, "\"label\":\"waiter-2\"},\"waiting_ms\":")) << json.out;

  holder->unlock();  // hands over to waiter-1 (no round trip of its own)
  ASSERT_TRUE(w1.wait_for_output("got1", 10s)) << w1.stderr_text();
  const std::string handed = status(name);
  EXPECT_TRUE(contains(handed, "  holder: host=" + host_name() + " pid=" + std::to_string(w1.pid()) +
                                   " label=waiter-1\n"))
      << handed;
  EXPECT_TRUE(contains(handed, "waiters: 1,")) << handed;
  EXPECT_TRUE(w1.wait(10s).succeeded());
  EXPECT_TRUE(w2.wait(10s).succeeded());
  EXPECT_FALSE(exists(lock_companion_key(name, "who")));
  EXPECT_FALSE(exists(lock_companion_key(name, "qwho"))) << "waiters' records leave with them";
}

TEST_F(CliStatusHolders, SigkilledHoldersRecordDisappearsWithItsLease) {
  const std::string name = key("crashed");
  Child run = spawn_lockon({"run", "--url", server().url(), "--ttl", "1s", "--label", "doomed", name, "--", "sh",
                            "-c", "echo ready $$; exec sleep 5"});
  ASSERT_TRUE(run.wait_for_output("ready", 10s)) << run.stderr_text();
  const std::string out = run.stdout_text();
  const pid_t child = static_cast<pid_t>(std::stol(out.substr(out.find(' ') + 1)));
  run.kill(SIGKILL);
  run.wait(5s);
  const std::string who = lock_companion_key(name, "who");
  EXPECT_TRUE(exists(who));
  EXPECT_LE(server().command({"PTTL", who}).integer, 1000);
  EXPECT_TRUE(eventually(3s, [&] { return !exists(who) && !exists(name); }));
  EXPECT_TRUE(contains(status(name), "state: free")) << status(name);
  ::kill(child, SIGKILL);
}

TEST_F(CliStatusHolders, RenewalKeepsTheRecordInStepWithTheLease) {
  const std::string name = key("renewed");
  Lock lock(Client(server().url()), name, {.ttl = 600ms});
  lock.lock();
  std::this_thread::sleep_for(1500ms);
  const std::string who = lock_companion_key(name, "who");
  ASSERT_TRUE(exists(who)) << "the watchdog renews the record with the lease";
  EXPECT_GT(server().command({"PTTL", who}).integer, 0);
  EXPECT_LE(server().command({"PTTL", who}).integer, 600);
  lock.unlock();
  EXPECT_FALSE(exists(who));
}

TEST_F(CliStatusHolders, NoRecordWhenTurnedOff) {
  const std::string name = key("norecord");
  Lock lock(Client(server().url()), name, {.holder_record = false});
  lock.lock();
  EXPECT_FALSE(exists(lock_companion_key(name, "who")));
  EXPECT_TRUE(contains(status(name), "holder: unknown")) << status(name);
}

// A record names the current holder or is absent: an attempt that found K
// held by a holder without a record wrote its own record beside it (the
// record's SET NX found the who key empty) and left it there, for its TTL,
// naming a process that held nothing.
TEST_F(CliStatusHolders, ALosingAttemptLeavesNoRecordBesideAHolderWithoutOne) {
  const std::string name = key("beside");
  const Client client(server().url());
  Lock holder(client, name, {.holder_record = false});
  ASSERT_TRUE(holder.try_lock());
  for (const bool fencing : {false, true}) {
    Lock loser(client, name, {.fencing = fencing, .holder_label = "loser"});
    EXPECT_FALSE(loser.try_lock());
    EXPECT_FALSE(exists(lock_companion_key(name, "who"))) << (fencing ? "fenced: " : "") << "the loser's record stayed";
  }
  EXPECT_TRUE(contains(status(name), "holder: unknown")) << status(name);
}

// A holder's label and a key's name come from whoever wrote them: control
// bytes in them (an escape sequence, a bell) were written raw by `status`
// and `list` (review round 2, session 21).
TEST_F(CliStatusHolders, ControlBytesInRecordsAndNamesAreNotWrittenToTheTerminal) {
  const std::string base = key("esc");
  Lock labelled(Client(server().url()), base + ":a", {.holder_label = "\x1b]0;PWNED\x07\x1b[2J"});
  Lock named(Client(server().url()), base + ":b\x1b[31m");
  labelled.lock();
  named.lock();
  const ProcessResult st = lockon({"status", "--url", server().url(), base + ":a"});
  EXPECT_TRUE(contains(st.out, "label=")) << st.describe();
  EXPECT_FALSE(contains(st.out, "\x1b")) << st.out;
  EXPECT_FALSE(contains(st.out, "\x07")) << st.out;
  const ProcessResult list = lockon({"list", "--url", server().url(), base + ":*"});
  EXPECT_TRUE(contains(list.out, "2 locks held")) << list.describe();
  EXPECT_FALSE(contains(list.out, "\x1b")) << list.out;
  EXPECT_FALSE(contains(list.out, "\x07")) << list.out;
}

TEST_F(CliStatusHolders, ListShowsHeldLocksMatchingThePattern) {
  const std::string base = key("list");
  Lock a(Client(server().url()), base + ":a", {.holder_label = "la"});
  Lock b(Client(server().url()), base + ":b", {.fencing = true, .holder_label = "lb"});
  Lock other(Client(server().url()), key("other"));
  a.lock();
  b.lock();
  other.lock();
  const ProcessResult r = lockon({"list", "--url", server().url(), base + ":*"});
  ASSERT_TRUE(r.succeeded()) << r.describe();
  EXPECT_TRUE(contains(r.out, base + ":a  held for ")) << r.out;
  EXPECT_TRUE(contains(r.out, "label=la\n")) << r.out;
  EXPECT_TRUE(contains(r.out, base + ":b  held for ")) << r.out;
  EXPECT_TRUE(contains(r.out, "\n2 locks held\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "other")) << r.out;
  const ProcessResult json = lockon({"list", "--json", "--url", server().url(), base + ":*"});
  EXPECT_TRUE(contains(json.out, "\"complete\":true")) << json.out;
  EXPECT_TRUE(contains(json.out, "{\"key\":\"" + base + ":a\",\"holder\":{")) << json.out;
  b.unlock();
  const ProcessResult after = lockon({"list", "--url", server().url(), base + ":*"});
  EXPECT_TRUE(contains(after.out, "\n1 lock held\n") || after.out.rfind("1 lock held", 0) == 0) << after.out;
}

// A hand-over leaves its companion keys ({K}:hf, {K}:hs, {K}:who) beside
// the lock: list shows the lock once, never a companion as a lock.
TEST_F(CliStatusHolders, ListSkipsTheCompanionKeysOfAHandOver) {
  // A hash-tagged name: its companions are "<name>:q" etc., matched by the
  // same pattern as the lock itself.
  const std::string tag = "{" + key("list-handed") + "}";
  const std::string name = tag + ":k";
  Lock holder(Client(server().url()), name, {.ttl = 30s});
  holder.lock();
  std::atomic<bool> held{false}, done{false};
  std::jthread waiter([&] {
    Lock next(Client(server().url()), name, {.ttl = 30s, .holder_label = "next"});
    if (!next.try_lock_for(10s)) return;
    held = true;
    for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(10ms);
    next.unlock();
  });
  ASSERT_TRUE(eventually(5000ms, [&] { return exists(lock_companion_key(name, "q")); }));
  holder.unlock();  // handed to the waiter
  ASSERT_TRUE(eventually(5000ms, [&] { return held.load(); }));
  EXPECT_TRUE(exists(lock_companion_key(name, "hs"))) << "no hand-over record: the test proves nothing";
  const ProcessResult r = lockon({"list", "--url", server().url(), tag + "*"});
  done = true;
  waiter.join();
  ASSERT_TRUE(r.succeeded()) << r.describe();
  EXPECT_TRUE(contains(r.out, name + "  held for ")) << r.out;
  EXPECT_TRUE(r.out.find("1 lock held") != std::string::npos) << r.out;
  for (const char* suffix : {":hs", ":hf", ":who", ":q"}) EXPECT_FALSE(contains(r.out, suffix + std::string("  "))) << r.out;
}

// A wrong password exits 77 ("Redis refused the credentials") on a cluster
// URL as on a single server. Before the fix (security review M2) the cluster
// map read turned the AuthError into a ConnectError: exit 69, unavailable.
TEST(CliStatusAuth, WrongPasswordExits77OnAServerAndOnAClusterUrl) {
  constexpr int kAuth = 77;
  RedisServer secured({.requirepass = "Right-Pw1"});
  const std::string at = "127.0.0.1:" + std::to_string(secured.port());
  for (const std::string scheme : {"redis", "redis-cluster"}) {
    const ProcessResult r = lockon({"status", "--url", scheme + "://:Bad-Pw2@" + at, "some-lock"});
    EXPECT_EQ(r.exit_code, kAuth) << scheme << ": " << r.describe();
    EXPECT_FALSE(contains(r.err, "Bad-Pw2")) << r.err;
  }
}

// Issue 35 §4: `list` on a Cluster URL failed with CROSSSLOT (one page's
// keys span slots; the probe pipeline went through the Cluster client) and
// scanned only the node the URL names. It lists the locks of every master.
TEST(CliListCluster, ListsTheLocksOfEveryMaster) {
  RedisCluster cluster(3, 0);
  Client client(cluster.url());
  const std::string base = unique_key("cluster-list");
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < 12; ++i) {
    locks.push_back(std::make_unique<Lock>(client, base + ":" + std::to_string(i), LockOptions{.ttl = 60s}));
    ASSERT_TRUE(locks.back()->try_lock_for(5s)) << "lock " << i;
  }
  Client(cluster.url()).command({"SET", base + ":not-a-lock", "x"});  // an application key beside them
  const ProcessResult r = lockon({"list", "--url", cluster.url(), base + ":*"});
  ASSERT_TRUE(r.succeeded()) << r.describe();
  EXPECT_TRUE(contains(r.out, "\n12 locks held\n")) << r.out;
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(contains(r.out, base + ":" + std::to_string(i) + "  held for ")) << i;
  EXPECT_FALSE(contains(r.out, "not-a-lock")) << r.out;
  const ProcessResult json = lockon({"list", "--json", "--url", cluster.url(), base + ":*"});
  EXPECT_TRUE(contains(json.out, "\"complete\":true")) << json.out;
  for (auto& lock : locks) lock->unlock();
}

}  // namespace
}  // namespace lockon::test
