// verify/worker.cpp — one worker process of the verification harness.
//
// Several threads loop until a given CLOCK_MONOTONIC instant, each running
// short critical sections on a small set of keys through one of five
// mechanisms chosen at random per section: lockon::Lock, RedisLocker::lock_on
// (both on the same keys of the single lock server, so they contend with each
// other), lockon::Redlock (over the node servers), a ReadWriteLock's write
// side or read share (half and half, on 4 keys of their own on the lock
// server: fewer keys, so that shares meet), and a Semaphore of
// kSemaphorePermits permits (4 keys of its own too). Inside a fenced
// section the thread does a fenced read-modify-write of a counter on the
// resource server (resource.hpp); inside an unfenced one (read-write lock,
// semaphore: no fences) an unchecked access of the same shape, their
// exclusion being checked from the sections' times. Every attempt is logged
// as one CsRecord line.
#include <cstdint>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "history.hpp"
#include "lockon/lock.hpp"
#include "lockon/locker.hpp"
#include "lockon/read_write_lock.hpp"
#include "lockon/redlock.hpp"
#include "lockon/semaphore.hpp"
#include "resource.hpp"
#include "verify.hpp"

namespace lockon::verify {

namespace {

struct WorkerConfig {
  std::string id;
  std::string log_path;
  std::string lock_url;
  std::vector<std::string> node_urls;
  std::string resource_url;
  int threads = 3;
  int keys = 8;
  std::chrono::milliseconds ttl{2000};
  std::chrono::milliseconds deadline{3000};
  std::chrono::microseconds hold{0};  // sleep between the read and the write: widens overlaps
  // 1 in N Lock/lock_on sections holds 2.5 x ttl instead (renewed): past the
  // hand-over record's two leases, so a pause then tests that a holder that
  // kept the key long still costs one lease per process (0: never).
  int long_hold_every = 0;
  std::int64_t until_ns = 0;
  std::uint64_t seed = 1;
  // Sentinel topology: each section records the port of the master it ran
  // on (CONFIG GET port right after the acquisition, on the lock's Client),
  // so the checker can tell a section granted by an old master.
  bool record_port = false;
};

// Socket bounds (the library's defaults, spelt out): a stalled server costs a
// call at most a second — the checker's deadline tolerance is derived from it.
// A URL that has its own (the Sentinel topology's, shorter) keeps them.
std::string with_timeouts(const std::string& url) {
  return url.find('?') != std::string::npos ? url : url + "?socket_timeout=1s&connect_timeout=1s";
}

class WorkerThread {
 public:
  WorkerThread(const WorkerConfig& config, int index, LineLog& log, const Client& lock_client,
               const std::vector<Client>& nodes, const RedisLocker& locker, const Resource& resource)
      : config_(config), index_(index), log_(log), lock_client_(lock_client), nodes_(nodes), locker_(locker),
        resource_(resource), random_(config.seed * 7919 + static_cast<std::uint64_t>(index)) {}

  void run() {
    auto locked = locker_.lock_on<0>("verify::cs", [this](LockContext& context, int /*key*/) {
      current_.acquired_ns = now_ns();
      current_.fence = context.fence();
      current_.key = context.key();
      current_.server = server_port();
      announce_long_hold();
      current_.write = resource_.fenced_increment(current_.key, current_.fence, holder(), hold_);
      current_.lost = context.lost();
      current_.release_ns = now_ns();
    });
    while (now_ns() < config_.until_ns) {
      const int key = static_cast<int>(random_() % static_cast<std::uint64_t>(config_.keys));
      const auto pick = random_() % 12;
      current_ = CsRecord{.worker = config_.id, .thread = index_, .seq = ++seq_,
                          .deadline_ms = config_.deadline.count()};
      // Before start_ns: not the call's time. -1: asked, no answer (the
      // master stopped or dead: the client may switch during the call).
      current_.server_before = config_.record_port ? server_port() : 0;
      if (config_.record_port && current_.server_before == 0) current_.server_before = -1;
      current_.start_ns = now_ns();
      hold_ = config_.hold;
      if (pick != 8 && pick != 9 && config_.long_hold_every > 0 &&
          random_() % static_cast<std::uint64_t>(config_.long_hold_every) == 0)
        hold_ = std::chrono::duration_cast<std::chrono::microseconds>(config_.ttl * 5 / 2);
      if (pick < 4) {
        with_lock(key);
      } else if (pick < 8) {
        current_.mechanism = "lock_on";
        current_.key = locker_.key_for<0>("verify::cs", key);
        try {
          locked(key);
        } catch (...) {
          note_error(std::current_exception());
        }
      } else if (pick < 10) {
        if (nodes_.empty()) {
          with_lock(key);  // no Redlock nodes in this topology
        } else {
          with_redlock(key);
        }
      } else if (pick == 10) {
        with_read_write_lock(key % 4, random_() % 2 == 0);
      } else {
        with_semaphore(key % 4);
      }
      if (current_.end_ns == 0) current_.end_ns = now_ns();
      if (current_.acquired_ns == 0) current_.acquired_ns = current_.end_ns;
      log_.append(format(current_));
    }
  }

 private:
  // The port of the server the lock Client sends to now (0: not recorded,
  // or the question failed: it never fails the section).
  int server_port() const {
    if (!config_.record_port) return 0;
    try {
      const Reply reply = lock_client_.command({"CONFIG", "GET", "port"});
      return std::stoi(reply.elements().at(1).as_string());
    } catch (...) {
      return 0;
    }
  }

  // A long hold is logged as it begins: if the worker is killed while
  // holding, its section's record never comes, and the checker must still
  // know the key was held.
  void announce_long_hold() {
    if (hold_ <= config_.hold) return;
    log_.append(format(HoldRecord{.worker = config_.id, .key = current_.key, .acquired_ns = current_.acquired_ns,
                                  .planned_end_ns = now_ns() + std::chrono::nanoseconds(hold_).count()}));
  }

  std::string holder() const { return config_.id + ':' + std::to_string(index_) + ':' + std::to_string(seq_); }

  // An exception before the section ran is an acquisition error; after, a
  // release error (LockLost, LockNotOwned, ...).
  void note_error(const std::exception_ptr& error) {
    const std::string name = error_name(error);
    (current_.release_ns == 0 ? current_.acquire_error : current_.release_error) = name;
    // The first message of each error type per thread goes to the worker's
    // .out file: the record has the type, the text says where it came from.
    if (seen_errors_.insert(current_.mechanism + ' ' + name).second) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        std::cerr << now_ns() << ' ' << config_.id << "/t" << index_ << ' ' << current_.mechanism << ' ' << name
                  << ": " << e.what() << std::endl;
      } catch (...) {
      }
    }
  }

  void with_lock(int key) {
    current_.mechanism = "lock";
    current_.key = locker_.key_for<0>("verify::cs", key);
    Lock lock(lock_client_, current_.key, {.ttl = config_.ttl, .fencing = true});
    held_section(lock);
  }

  void with_redlock(int key) {
    current_.mechanism = "redlock";
    current_.key = "vfy:redlock:" + std::to_string(key);
    try {
      // An explicit per-node timeout (the automatic one is 25 ms for this
      // TTL): the verification runs beside other tests on 2 cores, and a
      // server starved of CPU for 25 ms is load, not a fault to report.
      Redlock lock(nodes_, current_.key, {.ttl = config_.ttl, .fencing = true},
                   {.per_node_timeout = std::chrono::milliseconds(250), .check_nodes = false});
      held_section(lock);
    } catch (...) {
      note_error(std::current_exception());
    }
  }

  // A ReadWriteLock's write side, or (`shared`) a read share.
  void with_read_write_lock(int key, bool shared) {
    current_.mechanism = shared ? "rw_read" : "rw_write";
    current_.key = "vfy:rw:" + std::to_string(key);
    try {
      ReadWriteLock lock(lock_client_, current_.key, {.ttl = config_.ttl});
      unfenced_section(shared ? lock.try_lock_shared_for(config_.deadline) : lock.try_lock_for(config_.deadline),
                       lock);
    } catch (...) {
      note_error(std::current_exception());
    }
  }

  void with_semaphore(int key) {
    current_.mechanism = "sem";
    current_.key = "vfy:sem:" + std::to_string(key);
    try {
      Semaphore semaphore(lock_client_, current_.key, kSemaphorePermits, {.ttl = config_.ttl});
      unfenced_section(semaphore.try_acquire_for(config_.deadline), semaphore);
    } catch (...) {
      note_error(std::current_exception());
    }
  }

  // The section of a ReadWriteLock or Semaphore `lock` whose acquisition
  // returned `acquired`: release() / release_or_throw() report a lease that
  // had ended, as a DistributedLock's release() does.
  template <class SharedLock>
  void unfenced_section(bool acquired, SharedLock& lock) {
    current_.acquired_ns = now_ns();
    if (!acquired) {
      current_.acquire_error = "busy";
      current_.end_ns = now_ns();
      return;
    }
    try {
      current_.server = server_port();
      announce_long_hold();
      current_.write = resource_.unfenced_access(current_.key, hold_);
      current_.lost = lock.lost();
      current_.release_ns = now_ns();
      if constexpr (std::is_same_v<SharedLock, Semaphore>) {
        lock.release_or_throw();
      } else {
        lock.release();
      }
    } catch (...) {
      if (current_.release_ns == 0) current_.release_ns = now_ns();
      note_error(std::current_exception());
    }
    current_.end_ns = now_ns();
  }

  void held_section(DistributedLock& lock) {
    try {
      if (!lock.try_lock_for(config_.deadline)) {
        current_.acquired_ns = now_ns();
        current_.acquire_error = "busy";
        return;
      }
      current_.acquired_ns = now_ns();
      current_.fence = lock.fence();
      if (current_.mechanism != "redlock") current_.server = server_port();
      announce_long_hold();
      current_.write = resource_.fenced_increment(current_.key, current_.fence, holder(), hold_);
      current_.lost = lock.lost();
      current_.release_ns = now_ns();
      lock.release();
    } catch (...) {
      note_error(std::current_exception());
      lock.unlock();
    }
    current_.end_ns = now_ns();
  }

  const WorkerConfig& config_;
  int index_;
  LineLog& log_;
  const Client& lock_client_;
  const std::vector<Client>& nodes_;
  const RedisLocker& locker_;
  const Resource& resource_;
  std::mt19937_64 random_;
  long long seq_ = 0;
  std::chrono::microseconds hold_{0};  // this section's
  std::set<std::string> seen_errors_;
  CsRecord current_;
};

}  // namespace

int run_worker(const Args& args) {
  WorkerConfig config;
  config.id = args.get("id");
  config.log_path = args.get("log");
  config.lock_url = args.get("lock-url");
  std::stringstream nodes(args.get("nodes"));
  for (std::string url; std::getline(nodes, url, ',');) config.node_urls.push_back(url);
  config.resource_url = args.get("resource-url");
  config.threads = static_cast<int>(args.number("threads", 3));
  config.keys = static_cast<int>(args.number("keys", 8));
  config.ttl = std::chrono::milliseconds(args.number("ttl", 2000));
  config.deadline = std::chrono::milliseconds(args.number("deadline", 3000));
  config.until_ns = args.number("until", 0);
  config.hold = std::chrono::microseconds(args.number("hold-us", 0));
  config.long_hold_every = static_cast<int>(args.number("long-hold-every", 0));
  config.seed = static_cast<std::uint64_t>(args.number("seed", 1));
  config.record_port = args.number("record-port", 0) != 0;

  LineLog log(config.log_path);
  const PoolOptions pool{.size = static_cast<std::size_t>(config.threads) + 2};
  const Client lock_client(with_timeouts(config.lock_url), pool);
  std::vector<Client> node_clients;
  for (const auto& url : config.node_urls) node_clients.emplace_back(with_timeouts(url), pool);
  const RedisLocker locker(lock_client, {.max_retry = 0, .retry_delay = std::chrono::milliseconds(500),
                                         .timeout = config.deadline, .ttl = config.ttl, .key_prefix = "vfy",
                                         .fencing = true});
  const Resource resource(config.resource_url, static_cast<std::size_t>(config.threads) + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < config.threads; ++t) {
    threads.emplace_back([&, t] {
      WorkerThread(config, t, log, lock_client, node_clients, locker, resource).run();
    });
  }
  for (auto& thread : threads) thread.join();
  return 0;
}

}  // namespace lockon::verify
