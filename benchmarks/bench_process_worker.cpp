// The worker processes of BM_ContentionProcesses (bench_processes.cpp): one
// kind of lock each, running critical sections in the blocks the parent
// scheduled, and reporting what each section cost. Started as
// `lockon_benchmarks --process-worker KIND ...` (main.cpp).
#include <hiredis/hiredis.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lockon/client.hpp"
#include "lockon/lock.hpp"
#include "process_bench.hpp"

namespace {

using namespace lockon::bench::processes;
using namespace std::chrono_literals;

constexpr const char* kCompareAndDelete =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

struct SpinLock {
  SpinLock(const std::string& url, std::string key) : raw(url), key_(std::move(key)) {
    token = std::to_string(::getpid());
    sha = raw.run({"SCRIPT", "LOAD", kCompareAndDelete})->str;
  }
  void acquire() {
    while (raw.run({"SET", key_, token, "NX", "PX", "30000"})->type == REDIS_REPLY_NIL) {
    }
  }
  void release() { raw.run({"EVALSHA", sha, "1", key_, token}); }
  Raw raw;
  std::string key_, token, sha;
};

// The cheapest FIFO hand-over Redis offers, as a floor for any fair lock
// (docs/benchmarks.md, session 19): the N processes pass one token round a
// ring of lists. A holder releases with RPUSH onto the next process's list
// (one round trip, as lockon's release script is); a waiter blocks in BLPOP
// on its own list, so the hand-over is one server-side wake-up and one
// reply, with no script, no queue to join and no lease. Every section
// changes process (0 % re-takes), as in a FIFO lock whose holders queue
// again at once. `poll`: the waiter looks at its socket without blocking,
// yielding the CPU between looks, as lockon's waiters do near their turn.
struct RingLock {
  RingLock(const std::string& url, const std::string& key, int index, int processes, bool poll)
      : raw(url), own_(key + ":" + std::to_string(index)),
        next_(key + ":" + std::to_string((index + 1) % processes)), poll_(poll) {}
  void acquire() {
    const auto give_up = Clock::now() + 10s;
    if (poll_) {
      const char* argv[] = {"BLPOP", own_.c_str(), "10"};
      redisAppendCommandArgv(raw.context(), 3, argv, nullptr);
      for (int done = 0; done == 0;)
        if (redisBufferWrite(raw.context(), &done) != REDIS_OK) throw std::runtime_error("ring: write failed");
      char byte = 0;
      while (::recv(raw.context()->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) {
        if (Clock::now() > give_up) throw std::runtime_error("ring: no token within 10 s");
        sched_yield();
      }
      void* reply = nullptr;
      if (redisGetReply(raw.context(), &reply) != REDIS_OK || reply == nullptr) throw std::runtime_error("ring: read failed");
      const Raw::Reply owned(static_cast<redisReply*>(reply));
      if (owned->type != REDIS_REPLY_ARRAY) throw std::runtime_error("ring: no token within 10 s");
      return;
    }
    if (raw.run({"BLPOP", own_, "10"})->type != REDIS_REPLY_ARRAY) throw std::runtime_error("ring: no token within 10 s");
  }
  void release() { raw.run({"RPUSH", next_, "t"}); }
  Raw raw;
  std::string own_, next_;
  bool poll_;
};

// Between the token ring and lockon (docs/benchmarks.md, session 19): a
// FIFO lock with lockon's shape (a queueing script, then a wait; a release
// script that pops the queue and hands the key over) and nothing else — no
// lease records, no holder records, no liveness checks. `pubsub`: the
// hand-over is PUBLISHed to the waiter's own subscriber connection, as
// lockon's is; otherwise RPUSHed to a list the waiter BLPOPs on its command
// connection. Each step from the ring to lockon then shows what it costs.
struct QueueLock {
  static constexpr const char* kQueue =
      "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end\n"
      "redis.call('RPUSH', KEYS[2], ARGV[1]) redis.call('PEXPIRE', KEYS[2], 60000) return 0";
  static constexpr const char* kReleaseList =
      "local e = redis.call('LPOP', KEYS[2])\n"
      "if not e then redis.call('DEL', KEYS[1]) return 0 end\n"
      "redis.call('SET', KEYS[1], e, 'PX', 30000) redis.call('RPUSH', KEYS[1] .. ':wake:' .. e, 't') return 1";
  static constexpr const char* kReleasePublish =
      "local e = redis.call('LPOP', KEYS[2])\n"
      "if not e then redis.call('DEL', KEYS[1]) return 0 end\n"
      "redis.call('SET', KEYS[1], e, 'PX', 30000) redis.call('PUBLISH', KEYS[1] .. ':wake:' .. e, 't') return 1";
  QueueLock(const std::string& url, const std::string& key, bool pubsub, bool fat = false)
      : raw(url), key_(key), queue_(key + ":q"), id_(std::to_string(::getpid())), wake_(key + ":wake:" + id_),
        pubsub_(pubsub) {
    queue_sha_ = raw.run({"SCRIPT", "LOAD", fat ? queue_fat::kQueue : kQueue})->str;
    release_sha_ = raw.run({"SCRIPT", "LOAD", fat ? queue_fat::kRelease : pubsub ? kReleasePublish : kReleaseList})->str;
    if (pubsub) {
      subscriber_ = std::make_unique<Raw>(url);
      subscriber_->run({"SUBSCRIBE", wake_});
    }
  }
  void acquire() {
    if (raw.run({"EVALSHA", queue_sha_, "2", key_, queue_, id_})->integer == 1) return;
    if (!pubsub_) {
      if (raw.run({"BLPOP", wake_, "10"})->type != REDIS_REPLY_ARRAY) throw std::runtime_error("queue: no hand-over in 10 s");
      return;
    }
    void* message = nullptr;
    if (redisGetReply(subscriber_->context(), &message) != REDIS_OK || message == nullptr)
      throw std::runtime_error("queue: subscriber read failed");
    freeReplyObject(message);
  }
  void release() { raw.run({"EVALSHA", release_sha_, "2", key_, queue_}); }
  Raw raw;
  std::unique_ptr<Raw> subscriber_;
  std::string key_, queue_, id_, wake_, queue_sha_, release_sha_;
  bool pubsub_;
};

struct LockonLock {
  LockonLock(const lockon::ConnectionOptions& connection, const std::string& key, lockon::LockOptions options = {})
      : client(connection), lock(client, key, std::move(options)) {
    client.ping();
  }
  void acquire() {
    if (!lock.try_lock_for(10s)) throw std::runtime_error("lockon worker: no grant within 10 s");
  }
  void release() { lock.unlock(); }
  lockon::Client client;
  lockon::Lock lock;
};

// What one block measured, formatted only after the last block: formatting
// thousands of numbers as a block ends took the CPU from the sections still
// running in the other workers on the 2 cores, and showed as 2-3 ms waits
// at the end of every block (docs/benchmarks.md, session 21).
struct BlockRecord {
  long long voluntary = 0, involuntary = 0;
  double cpu_s = 0;
  std::vector<long long> seqs, waits;
  std::vector<long long> acquired_at, releasing_at, data_us;  // µs: into the block, into the block, long
  std::vector<std::pair<long long, long long>> slow;          // (µs into the block, wait µs) of waits > 2 ms
};

void print_blocks(const std::vector<BlockRecord>& records) {
  std::ostringstream out;
  for (std::size_t b = 0; b < records.size(); ++b) {
    const BlockRecord& r = records[b];
    out << "block " << b << ' ' << r.seqs.size() << ' ' << r.voluntary << ' ' << r.involuntary << ' ' << r.cpu_s
        << "\nseq";
    for (const long long s : r.seqs) out << ' ' << s;
    out << "\nwait";
    for (const long long w : r.waits) out << ' ' << w;
    for (const auto& [tag, values] : {std::pair{"acq", &r.acquired_at}, {"rel", &r.releasing_at}, {"data", &r.data_us}}) {
      out << '\n' << tag;
      for (const long long v : *values) out << ' ' << v;
    }
    out << "\nslow";  // for reading by hand (docs/benchmarks.md)
    for (const auto& [at, w] : r.slow) out << ' ' << at << ':' << w;
    out << '\n';
  }
  std::cout << out.str() << "done" << std::endl;
}

// argv: kind url lock_key counter_prefix start_ns,stop_ns ...
template <class L>
int run_worker(L& lock, Raw& data, const std::string& counter_prefix, const std::vector<std::pair<long long, long long>>& blocks) {
  std::vector<BlockRecord> records(blocks.size());
  for (BlockRecord& r : records) {  // no allocation inside a block either
    for (auto* v : {&r.seqs, &r.waits, &r.acquired_at, &r.releasing_at, &r.data_us}) v->reserve(1 << 14);
    r.slow.reserve(256);
  }
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    BlockRecord& r = records[b];
    const std::string counter = counter_prefix + std::to_string(b);
    std::this_thread::sleep_until(from_ns(blocks[b].first));
    const auto stop = from_ns(blocks[b].second);
    const auto block_start = from_ns(blocks[b].first);
    const auto us_since = [](Clock::time_point from, Clock::time_point to) {
      return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
    };
    const auto began = Clock::now();
    const Usage before = Usage::now();
    while (Clock::now() < stop) {
      const auto t0 = Clock::now();
      lock.acquire();
      const auto acquired = Clock::now();
      r.waits.push_back(us_since(t0, acquired));
      if (r.waits.back() > 2000) r.slow.push_back({us_since(began, t0), r.waits.back()});
      const auto value = data.run({"GET", counter});
      const long long next = (value->type == REDIS_REPLY_STRING ? std::stoll(value->str) : 0) + 1;
      data.run({"SET", counter, std::to_string(next)});
      r.seqs.push_back(next);
      const auto releasing = Clock::now();
      r.acquired_at.push_back(us_since(block_start, acquired));
      r.releasing_at.push_back(us_since(block_start, releasing));
      r.data_us.push_back(us_since(acquired, releasing));
      lock.release();
    }
    const Usage after = Usage::now();
    r.voluntary = after.voluntary - before.voluntary;
    r.involuntary = after.involuntary - before.involuntary;
    r.cpu_s = after.cpu_s - before.cpu_s;
  }
  print_blocks(records);
  return 0;
}
}  // namespace

namespace lockon::bench {

// lockon_benchmarks --process-worker KIND URL LOCK_KEY COUNTER_PREFIX START_NS,STOP_NS...
int process_worker_main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: --process-worker spin|lockon[+opts]|sleep[+opts]|queue_list|queue_pub|queue_fat|ring:I:N|ring_poll:I:N URL LOCK_KEY COUNTER_PREFIX START_NS,STOP_NS...\n";
    return 2;
  }
  const std::string kind = argv[0], url = argv[1], key = argv[2], counter_prefix = argv[3];
  std::vector<std::pair<long long, long long>> blocks;
  for (int i = 4; i < argc; ++i) {
    const std::string spec = argv[i];
    const auto comma = spec.find(',');
    blocks.push_back({std::stoll(spec.substr(0, comma)), std::stoll(spec.substr(comma + 1))});
  }
  try {
    Raw data(url);
    if (Clock::now() >= from_ns(blocks.front().first)) throw std::runtime_error("started after the first block began");
    if (kind.starts_with("ring")) {  // ring:INDEX:PROCESSES or ring_poll:INDEX:PROCESSES
      const auto colon = kind.find(':'), second = kind.find(':', colon + 1);
      RingLock lock(url, key, std::stoi(kind.substr(colon + 1, second - colon - 1)), std::stoi(kind.substr(second + 1)),
                    kind.starts_with("ring_poll"));
      return run_worker(lock, data, counter_prefix, blocks);
    }
    if (kind == "queue_list" || kind == "queue_pub" || kind == "queue_fat") {
      QueueLock lock(url, key, kind != "queue_list", kind == "queue_fat");
      return run_worker(lock, data, counter_prefix, blocks);
    }
    if (kind == "spin") {
      SpinLock lock(url, key);
      return run_worker(lock, data, counter_prefix, blocks);
    }
    // lockon | sleep, optionally +norecord (holder_record = false) and
    // +norenew (auto_renew = false), +pool (auto_pipeline = false),
    // +noreplyspin (reply_spin = 0: the I/O thread sleeps at once): what
    // those parts cost.
    const std::string base = kind.substr(0, kind.find('+'));
    if (base != "lockon" && base != "sleep") throw std::runtime_error("unknown kind of worker: " + kind);
    lockon::LockOptions options;
    if (base == "sleep") options.handoff_spin = std::chrono::microseconds(0);
    if (kind.find("+norecord") != std::string::npos) options.holder_record = false;
    if (kind.find("+norenew") != std::string::npos) options.auto_renew = false;
    auto connection = lockon::ConnectionOptions::from_url(url);
    if (kind.find("+pool") != std::string::npos) connection.auto_pipeline = false;
    if (kind.find("+noreplyspin") != std::string::npos) connection.reply_spin = std::chrono::microseconds(0);
    LockonLock lock(connection, key, std::move(options));
    return run_worker(lock, data, counter_prefix, blocks);
  } catch (const std::exception& e) {
    std::cerr << "process worker: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace lockon::bench
