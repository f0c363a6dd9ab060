// integration/test_auto_pipeline_attack.cpp — fault tests against the
// default Client's automatic pipelining (client/pipeline.hpp: one shared
// connection per server, a detached slot for a request whose deadline passed
// while its reply was owed, the connection dropped past the socket timeout
// or 4,096 replies owed to nobody). Attacks: mutual exclusion across
// threads and processes while the server is frozen and stalled; the
// detached-reply cap; the server killed and restarted on its port; fork() while the I/O
// thread works. Proxy-driven attacks: test_auto_pipeline_attack_proxy.cpp;
// orphaned acquisitions against the pool: test_auto_pipeline_orphans.cpp.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/client_impl.hpp"
#include "client/pipeline.hpp"
#include "integration/attack_mix.hpp"
#include "integration/auto_pipeline_support.hpp"
#include "lockon/client.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "support/fixtures.hpp"

namespace lockon::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using detail::Pipeline;
using detail::ReplyPtr;

long long steady_ns(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

// ECHO of `payload` through the pipeline; throws if another reply came.
void echo(Pipeline& pipeline, const std::string& payload, Clock::time_point deadline) {
  const std::array<std::string_view, 2> args{"ECHO", payload};
  const std::string got = text_of(pipeline.call(args, deadline, "ECHO"));
  if (got != payload) throw std::logic_error("ECHO " + payload + " answered " + got + " (misdelivered)");
}

// Several threads of this process (one default Client) and two worker
// processes take two keys with lock(), try_lock_for(1-3 ms) and
// try_lock_for(2 s), each doing a racy GET+SET of the key's counter inside,
// while the server is frozen (SIGSTOP 150 ms; once 1.3 s, past the 1 s
// socket timeout: the shared connection breaks) and stalled (DEBUG SLEEP
// 200 ms, and 20 ms ones every ~45 ms). Each counter must equal the sections done on its key, nobody may
// find another holder inside, fences must strictly increase.
TEST(AutoPipelineAttack, MutualExclusionAcrossThreadsAndProcessesUnderFreezesAndStalls) {
  RedisServer server;
  const std::string prefix = "attack:mx";
  Client client(server.url());
  ASSERT_NE(client.impl()->any_node()->pipeline(), nullptr) << "the default Client must pipeline";
  const Client data(server.url() + "?socket_timeout=10s");
  client.ping();
  const auto stop = Clock::now() + 6s;
  std::vector<Child> workers;
  for (int w = 0; w < 2; ++w)
    workers.push_back(spawn(worker_argv(
        "attack_mix", {server.url(), prefix, std::to_string(steady_ns(stop)), std::to_string(100 + w)})));
  constexpr int kThreads = 4;
  std::vector<attack::MixResult> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { results[t] = attack::run_mix(client, data, prefix, stop, 1 + t); });
  RawConnection staller = server.connect();
  staller.set_command_timeout(5s);
  std::this_thread::sleep_for(400ms);
  int freezes = 0, stalls = 0;
  for (int cycle = 0; cycle < 20 && Clock::now() < stop - 1800ms; ++cycle) {
    server.pause();
    std::this_thread::sleep_for(cycle == 1 ? 1300ms : 150ms);
    server.resume();
    ++freezes;
    std::this_thread::sleep_for(150ms);
    staller.command({"DEBUG", "SLEEP", "0.2"});
    ++stalls;
    // Short stalls, often: requests with 1-3 ms deadlines in flight when
    // one begins are detached (their SET NX runs after they gave up).
    for (int k = 0; k < 6; ++k) {
      std::this_thread::sleep_for(25ms);
      staller.command({"DEBUG", "SLEEP", "0.02"});
      ++stalls;
    }
  }
  for (auto& thread : threads) thread.join();
  std::array<long long, attack::kLocks> sections{};
  long long errors = 0, timeouts = 0, lost = 0;
  for (const auto& result : results) {
    EXPECT_TRUE(result.failure.empty()) << result.failure;
    for (int i = 0; i < attack::kLocks; ++i) sections[i] += result.sections[i];
    errors += result.typed_errors;
    timeouts += result.timeouts;
    lost += result.lost;
  }
  for (auto& worker : workers) {
    const ProcessResult done = worker.wait(20s);
    ASSERT_TRUE(done.succeeded()) << done.describe() << "\n" << done.out << done.err;
    std::istringstream in(done.out);
    std::string word;
    in >> word;
    ASSERT_EQ(word, "sections") << done.out;
    for (int i = 0; i < attack::kLocks; ++i) {
      long long n = 0;
      in >> n;
      sections[i] += n;
    }
    long long e = 0, to = 0, l = 0;
    in >> word >> e >> word >> to >> word >> l;
    errors += e;
    timeouts += to;
    lost += l;
  }
  EXPECT_EQ(lost, 0) << "a 5 s lease was lost under < 2 s freezes";
  for (int i = 0; i < attack::kLocks; ++i) {
    const RawReply counter = server.command({"GET", attack::counter_key(prefix, i)});
    ASSERT_FALSE(counter.is_nil()) << "no section ran on key " << i;
    EXPECT_EQ(std::stoll(counter.str), sections[i]) << "lost updates on key " << i << ": two holders at once";
    EXPECT_EQ(server.command({"GET", attack::inside_key(prefix, i)}).str, "0");
    EXPECT_GE(sections[i], 20) << "too little traffic on key " << i << " to mean anything";
  }
  const RawReply fences = server.command({"LRANGE", attack::fences_key(prefix, 0), "0", "-1"});
  ASSERT_EQ(static_cast<long long>(fences.elements.size()), sections[0]);
  for (std::size_t k = 1; k < fences.elements.size(); ++k)
    ASSERT_LT(std::stoull(fences.elements[k - 1].str), std::stoull(fences.elements[k].str)) << "fence order at " << k;
  std::printf("[attack] %d freezes, %d stalls: sections %lld + %lld, typed errors %lld, short timeouts %lld\n",
              freezes, stalls, sections[0], sections[1], errors, timeouts);
  EXPECT_GE(freezes, 3);
}

// Callers flood the shared connection (call_many of 64 ECHOs, 20-22 ms
// deadlines) until its I/O thread owns it, then the server is frozen: each
// call's deadline passes with its 64 replies owed, so it is detached, and
// the cap (4,096 replies owed to nobody) is passed within ~65 such calls.
// Every failure must be typed, the cap must drop the connection, every
// answer before the freeze must be the caller's own, and after SIGCONT
// every call must get its own reply on a new connection.
// (Frozen while a caller's own exchange owns the idle connection instead,
// its deadline breaks the connection and the reconnection's HELLO cannot be
// answered, so nothing is detached: the freeze is then retried.)
TEST(AutoPipelineAttack, DetachedReplyCapDropsTheConnectionAndEverythingRecovers) {
  RedisServer server;
  Client client(pipelined_options(server.port(), 10s));  // the cap, not the socket timeout, must act
  Pipeline& pipeline = pipeline_of(client);
  const std::array<std::string_view, 2> client_id{"CLIENT", "ID"};
  const long long id_before = pipeline.call(client_id, Clock::now() + 2s, "CLIENT ID")->integer;
  constexpr int kThreads = 8;
  constexpr int kBatch = 64;
  std::atomic<bool> stop{false};
  std::atomic<int> capped{0}, timeouts{0}, other_typed{0}, untyped{0}, answered{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::string> payloads(kBatch);
      std::vector<std::array<std::string_view, 2>> commands(kBatch);
      std::vector<std::span<const std::string_view>> spans(kBatch);
      for (int i = 0; i < 1000000 && !stop.load(); ++i) {
        for (int k = 0; k < kBatch; ++k) {
          payloads[k] = "flood-" + std::to_string(t) + "-" + std::to_string(i) + "-" + std::to_string(k);
          commands[k] = {"ECHO", payloads[k]};
          spans[k] = commands[k];
        }
        try {
          const auto replies =
              pipeline.call_many(spans, Clock::now() + std::chrono::milliseconds(20 + t % 3), "ECHO flood");
          for (int k = 0; k < kBatch; ++k)
            if (text_of(replies[k]) != payloads[k]) ++wrong;
          ++answered;
        } catch (const TimeoutError& e) {
          if (std::string(e.what()).find("too many replies owed") != std::string::npos) ++capped;
          else ++timeouts;
        } catch (const Error&) {
          ++other_typed;
        } catch (...) {
          ++untyped;
        }
      }
    });
  int freezes = 0;
  for (; freezes < 5 && capped.load() == 0; ++freezes) {
    const auto io_batches = pipeline.io_thread_batches();
    const int answers = answered.load();
    if (!eventually(5s, [&] {
          return pipeline.io_thread_batches() >= io_batches + 20 && answered.load() >= answers + 20;
        })) {
      ADD_FAILURE() << "the flood never kept the I/O thread busy";
      break;
    }
    server.pause();
    eventually(2s, [&] { return capped.load() > 0; });
    server.resume();
  }
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0) << "replies reached the wrong caller";
  EXPECT_EQ(untyped.load(), 0);
  EXPECT_GE(capped.load(), 1) << "the cap never dropped the connection (" << timeouts.load() << " timeouts, "
                              << other_typed.load() << " other typed errors)";
  // Recovery: every call gets its own reply, from every thread at once.
  std::atomic<int> wrong_after{0}, ok{0};
  threads.clear();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        try {
          echo(pipeline, "after-" + std::to_string(t) + "-" + std::to_string(i), Clock::now() + 5s);
          ++ok;
        } catch (const std::exception& e) {
          ADD_FAILURE() << "after SIGCONT: " << e.what();
          ++wrong_after;
          return;
        }
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong_after.load(), 0);
  EXPECT_EQ(ok.load(), kThreads * 200);
  // A new connection: the one with the detached replies was dropped.
  EXPECT_NE(pipeline.call(client_id, Clock::now() + 2s, "CLIENT ID")->integer, id_before);
  Lock lock(client, "attack:cap:lock", {.ttl = 5s});
  ASSERT_TRUE(lock.try_lock_for(2s));
  EXPECT_TRUE(lock.owned());
  lock.unlock();
  std::printf("[attack] cap: %d freezes, %d drops by the cap, %d answered calls, %d plain timeouts, %d other typed errors\n",
              freezes, capped.load(), answered.load(), timeouts.load(), other_typed.load());
}

// The server is SIGKILLed mid-traffic and restarted empty on its port:
// every failure is a lockon::Error (never a ProtocolError: no torn
// reply reaches the parser of a new connection), no reply is misdelivered
// (ECHO payloads, owned() compares our token), and afterwards every
// thread's lock cycles and ECHOs succeed.
TEST(AutoPipelineAttack, ServerKilledAndRestartedOnItsPortMidTraffic) {
  RedisServer server;
  Client client(server.url());
  Pipeline& pipeline = pipeline_of(client);
  constexpr int kThreads = 8;
  std::atomic<bool> stop{false};
  std::atomic<int> epoch{0};  // odd: between a kill and the restart's end
  std::atomic<int> typed{0}, protocol{0}, misdelivered{0}, ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Lock lock(client, "attack:kill:" + std::to_string(t % 3), {.ttl = 5s});
      for (int i = 0; i < 100000 && !stop.load(); ++i) {
        try {
          echo(pipeline, "k-" + std::to_string(t) + "-" + std::to_string(i), Clock::now() + 2s);
          const int before = epoch.load();
          if (lock.try_lock_for(300ms)) {
            const bool owned = lock.owned();
            // Not owned although no kill came between: a wrong GET reply.
            if (!owned && before % 2 == 0 && epoch.load() == before) ++misdelivered;
            lock.unlock();
          }
          ++ok;
        } catch (const ProtocolError& e) {
          ADD_FAILURE() << e.what();
          ++protocol;
        } catch (const Error&) {
          ++typed;
        } catch (const std::exception& e) {
          ADD_FAILURE() << "thread " << t << ": " << e.what();
          ++misdelivered;
          return;
        }
      }
    });
  std::this_thread::sleep_for(400ms);
  for (int round = 0; round < 2; ++round) {
    ++epoch;
    server.kill();
    std::this_thread::sleep_for(200ms);
    server.restart();
    ++epoch;
    std::this_thread::sleep_for(500ms);
  }
  const int ok_before = ok.load();
  EXPECT_TRUE(eventually(5s, [&] { return ok.load() >= ok_before + 4 * kThreads; })) << "no recovery";
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(protocol.load(), 0);
  EXPECT_GE(typed.load(), 1) << "the kill was not seen";
  EXPECT_EQ(misdelivered.load(), 0) << "replies reached the wrong caller";
  for (int i = 0; i < 50; ++i) {
    echo(pipeline, "after-" + std::to_string(i), Clock::now() + 2s);
    Lock lock(client, "attack:kill:after", {.ttl = 5s});
    ASSERT_TRUE(lock.try_lock_for(1s));
    ASSERT_TRUE(lock.owned());
    lock.unlock();
  }
  std::printf("[attack] kill/restart: %d typed errors, %d ok rounds\n", typed.load(), ok.load());
}

// Child exit codes.
enum ForkChildFailure : int { kSamePipeline = 10, kWrongEcho, kNotAcquired, kNotOwned, kChildException, kChildThread };

// fork() while 6 threads keep the parent's I/O thread busy: the child's
// Client gets a new Pipeline (a new node), threads in the child get their
// own replies and locks, and the parent goes on untouched.
TEST(AutoPipelineAttack, ForkWhileTheIoThreadIsBusy) {
  RedisServer server;
  Client client(server.url());
  Pipeline* parent_pipeline = &pipeline_of(client);
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000000 && !stop.load(); ++i) {
        try {
          echo(*parent_pipeline, "parent-" + std::to_string(t) + "-" + std::to_string(i), Clock::now() + 5s);
          ++ok;
        } catch (const std::exception& e) {
          ADD_FAILURE() << e.what();
          ++wrong;
          return;
        }
      }
    });
  ASSERT_TRUE(eventually(5s, [&] { return parent_pipeline->io_thread_batches() >= 50; }))
      << "the I/O thread never got busy";
  for (int fork_round = 0; fork_round < 3; ++fork_round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        Pipeline& mine = pipeline_of(client);
        if (&mine == parent_pipeline) std::_Exit(kSamePipeline);
        std::atomic<int> failures{0};
        std::vector<std::thread> helpers;
        for (int t = 0; t < 4; ++t)
          helpers.emplace_back([&, t] {
            try {
              Lock lock(client, "attack:fork:" + std::to_string(t % 2), {.ttl = 5s});
              for (int i = 0; i < 100; ++i) {
                echo(mine, "child-" + std::to_string(t) + "-" + std::to_string(i), Clock::now() + 5s);
                if (!lock.try_lock_for(5s)) {
                  failures = kNotAcquired;
                  return;
                }
                if (!lock.owned()) failures = kNotOwned;
                lock.unlock();
              }
            } catch (...) {
              failures = kChildThread;
            }
          });
        for (auto& helper : helpers) helper.join();
        status = failures.load();
      } catch (const std::logic_error&) {
        status = kWrongEcho;
      } catch (...) {
        status = kChildException;
      }
      std::_Exit(status);
    }
    int status = 0;
    pid_t reaped = 0;
    const auto give_up = Clock::now() + 10s;
    while ((reaped = waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < give_up)
      std::this_thread::sleep_for(5ms);
    if (reaped == 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "the child hung";
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  const int before = ok.load();
  EXPECT_TRUE(eventually(3s, [&] { return ok.load() > before + 100; })) << "the parent stopped after fork";
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace lockon::test
