#include "lock/watchdog.hpp"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

#include "client/client_impl.hpp"
#include "client/routed.hpp"
#include "lock/lock_calls.hpp"
#include "protocol/renewal.hpp"
#include "lockon/errors.hpp"
#include "common/fork.hpp"
#include "common/token.hpp"
#include "client/eviction_check.hpp"
#include "protocol/lock_scripts.hpp"
#include "client/script.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

using Clock = RenewalEntry::Clock;

// The lane of the leases that are not renewed. No server's name (a
// host:port or a socket path starts with no NUL): it never shares a lane
// with renewals, so a stalled server never delays a lease's end.
constexpr std::string_view kUnrenewedLane{"\0leases without renewal", 23};



// A loss found during a round, declared once the round released every
// entry mutex.
struct PendingLoss {
  std::shared_ptr<LeaseSignal> signal;
  LossReason reason;
  const char* detail;
};

// Applies a renewal outcome to an entry whose mutex the caller holds, by
// the renewal rule (protocol/renewal.hpp). `ticket`: the signal's
// renewal_ticket() when the renewal was sent (a replace-ttl extension
// overlapping it keeps its own, shorter end).
void settle(RenewalEntry& entry, RenewResult result, Clock::time_point sent_at, std::uint64_t ticket,
            std::vector<PendingLoss>& losses) {
  const RenewalVerdict verdict =
      settle_renewal(*entry.signal, result, sent_at, ticket, entry.ttl, entry.lease_expires, Clock::now());
  entry.lease_expires = verdict.lease_end;
  if (verdict.lost) {
    entry.active = false;
    losses.push_back({entry.signal, verdict.reason, verdict.detail});
  } else {
    entry.next_due = verdict.next_due;
  }
}

// An entry that is not renewed, due: its lease has ended (declare the
// loss), was closed by a release (forget it), or was moved later by an
// extension (look again then). Caller holds the entry's mutex.
void watch_end(RenewalEntry& entry, Clock::time_point now, std::vector<PendingLoss>& losses) {
  const auto end = entry.signal->lease_end();
  if (end == Clock::time_point::max()) {
    entry.active = false;
  } else if (now >= end) {
    entry.active = false;
    losses.push_back({entry.signal, LossReason::taken, "the lease ended without renewal (auto_renew is off)"});
  } else {
    entry.next_due = end;
  }
}

// Renews `entries` (indexes `which`) on `node` in one pipeline; results
// stay io_error on a connection failure or a redirection (the slot moved:
// the topology learns where, and the retry after renew_retry(ttl) goes
// there).
// The lease alone (KEYS: K), routed (an ASK followed): a renewal a
// migrating slot refused for its records (protocol/renewal.hpp). Bounded by
// the lease's end and the socket timeout.
RenewResult renew_lease_alone(ClientImpl& client, const RenewalEntry& entry) noexcept {
  try {
    const auto socket_timeout = client.options().socket_timeout.count() > 0 ? client.options().socket_timeout
                                                                             : std::chrono::milliseconds(5000);
    const auto until = std::min(entry.signal->lease_end(), Clock::now() + socket_timeout);
    const std::string ttl = std::to_string(entry.ttl.count());
    const std::array<std::string_view, 1> keys{entry.name};
    const std::array<std::string_view, 3> args{entry.token, ttl, "1"};
    const ReplyPtr reply = routed_call(client, entry.name, until, [&](Connection& connection, Node&) -> ReplyPtr {
      if (!connection.ensure_connected_by(until)) return nullptr;
      return eval_bounded(connection, scripts::renew(), keys, args, "renew lease", until);
    });
    if (!reply || reply->type != REDIS_REPLY_INTEGER) return RenewResult::io_error;
    return read_renew_reply(*reply);
  } catch (...) {
    return RenewResult::io_error;
  }
}

void renew_on_node(ClientImpl& client, Node& node, const std::vector<RenewalEntry*>& entries,
                   const std::vector<std::size_t>& which, std::vector<RenewResult>& results) {
  std::vector<std::size_t> alone;  // refused by a migrating slot: renewed below, K alone
  try {
    auto connection = node.pool().borrow();
    // Keeps the record naming this process as the one to drop if a lease
    // lapses ({K}:hs, lock_scripts.cpp) alive while it names us.
    const std::string process = subscriber_or_process_id(node.subscriber_id_if_started());
    std::vector<std::string> ttls;
    std::vector<std::string> whos;      // holder records: expire with the lease
    std::vector<std::string> handeds;   // lapse records ({K}:hs): kept while they name us
    std::vector<std::array<std::string_view, 3>> keys;
    std::vector<std::array<std::string_view, 4>> args;
    std::vector<ScriptCall> calls;
    ttls.reserve(which.size());
    whos.reserve(which.size());
    handeds.reserve(which.size());
    keys.reserve(which.size());
    args.reserve(which.size());
    calls.reserve(which.size());
    for (const std::size_t i : which) {
      const RenewalEntry& entry = *entries[i];
      ttls.push_back(std::to_string(entry.ttl.count()));
      whos.push_back(companion_key(entry.name, "who"));
      handeds.push_back(companion_key(entry.name, "hs"));
      keys.push_back({entry.name, whos.back(), handeds.back()});
      args.push_back({entry.token, ttls.back(), "1", process});
      calls.push_back({keys.back(), args.back()});
    }
    const std::vector<ReplyPtr> replies = eval_pipelined(*connection, scripts::renew(), calls, "renew lease");
    for (std::size_t n = 0; n < which.size(); ++n) {
      const redisReply& reply = *replies[n];
      const std::size_t i = which[n];
      if (reply.type == REDIS_REPLY_INTEGER) {
        results[i] = read_renew_reply(reply);
      } else if (reply.type == REDIS_REPLY_ERROR) {
        const std::string_view error(reply.str, reply.len);
        if (refused_by_migration(error.substr(0, error.find(' ')))) alone.push_back(i);
        else client.topology().report_error_reply(node, error);
      }
    }
  } catch (const IoError&) {
    client.topology().report_io_failure(node);
  } catch (...) {
    // Connection-level failure: every entry of this batch keeps io_error.
  }
  // After the pipeline's connection went back to the pool.
  for (const std::size_t i : alone) results[i] = renew_lease_alone(client, *entries[i]);
}

// Renews the single-instance entries of one client: one pipeline per node
// serving them (one for a single server; per master on a cluster). Caller
// holds every entry's mutex.
void renew_pipelined(ClientImpl& client, const std::vector<RenewalEntry*>& entries, std::vector<PendingLoss>& losses) {
  const auto sent_at = Clock::now();
  std::vector<std::uint64_t> tickets;
  tickets.reserve(entries.size());
  for (const RenewalEntry* entry : entries) tickets.push_back(entry->signal->renewal_ticket());
  std::vector<RenewResult> results(entries.size(), RenewResult::io_error);
  std::map<std::shared_ptr<Node>, std::vector<std::size_t>> by_node;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    try {
      by_node[client.node_for(entries[i]->name)].push_back(i);
    } catch (...) {
      // No node for it now (cluster map unreadable): io_error, retried.
    }
  }
  for (const auto& [node, which] : by_node) renew_on_node(client, *node, entries, which, results);
  for (std::size_t i = 0; i < entries.size(); ++i) settle(*entries[i], results[i], sent_at, tickets[i], losses);
}

}  // namespace

// One renewal thread and its entries: everything the old single watchdog
// did, for the entries of one server.
class Watchdog::Lane {
 public:
  ~Lane() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Before anything else, the lane's thread checks whether the server
  /// serving `key` may evict lock keys (eviction_check.hpp): once per
  /// server and process, off the callers' threads.
  void check_eviction_first(std::shared_ptr<ClientImpl> client, std::string key) {
    std::lock_guard lock(mutex_);
    check_client_ = std::move(client);
    check_key_ = std::move(key);
  }

  void add(std::shared_ptr<RenewalEntry> entry) {
    bool wake = false;
    {
      std::lock_guard lock(mutex_);
      if (entries_.size() >= compact_at_) {
        std::erase_if(entries_, [](const std::shared_ptr<RenewalEntry>& e) {
          std::unique_lock entry_lock(e->mutex, std::try_to_lock);
          return entry_lock.owns_lock() && !e->active;
        });
        compact_at_ = std::max<std::size_t>(256, 2 * entries_.size());
      }
      wake = entry->next_due < planned_wake_;
      entries_.push_back(std::move(entry));
      if (!running_) {
        // The previous thread (if any) left its loop and is ending.
        if (thread_.joinable()) thread_.join();
        running_ = true;
        planned_wake_ = Clock::time_point::min();
        thread_ = std::thread([this] { run(); });
      }
    }
    if (wake) changed_.notify_all();
  }

 private:
  // A lane without entries ends its thread after this long; add() starts a
  // new one. Tests and tools talk to many short-lived servers.
  static constexpr std::chrono::seconds kIdleExit{5};

  void run() {
    std::unique_lock lock(mutex_);
    if (check_client_) {
      const auto client = std::move(check_client_);
      const std::string key = std::move(check_key_);
      check_client_.reset();
      lock.unlock();
      check_eviction_policy(*client, key);  // one round trip, before the first renewal is due
      lock.lock();
    }
    auto idle_since = Clock::now();
    while (!stopping_) {
      auto next_wake = Clock::time_point::max();
      std::vector<std::shared_ptr<RenewalEntry>> due;
      const auto now = Clock::now();
      std::erase_if(entries_, [&](const std::shared_ptr<RenewalEntry>& entry) {
        std::unique_lock entry_lock(entry->mutex, std::try_to_lock);
        if (!entry_lock.owns_lock()) return false;  // being stopped right now
        if (!entry->active) return true;
        const auto when = std::min(entry->next_due, entry->hold_deadline);
        if (when <= now) due.push_back(entry);
        else next_wake = std::min(next_wake, when);
        return false;
      });
      if (entries_.empty()) {
        if (now - idle_since >= kIdleExit) break;
        next_wake = idle_since + kIdleExit;
      } else {
        idle_since = now;
      }
      if (due.empty()) {
        planned_wake_ = next_wake;
        changed_.wait_until(lock, next_wake);
        continue;
      }
      planned_wake_ = Clock::time_point::min();  // busy: add() need not wake us
      lock.unlock();
      renew_due(due);
      lock.lock();
    }
    running_ = false;
  }

  static void renew_due(std::vector<std::shared_ptr<RenewalEntry>>& due) {
    std::vector<PendingLoss> losses;
    {
      // Lock every due entry for the whole renewal: stop() waits on it.
      std::vector<std::unique_lock<std::mutex>> held;
      std::map<ClientImpl*, std::vector<RenewalEntry*>> batches;
      std::vector<RenewalEntry*> singles;
      held.reserve(due.size());
      const auto now = Clock::now();
      for (auto& entry : due) {
        std::unique_lock entry_lock(entry->mutex);
        if (!entry->active) continue;
        if (!entry->renews) {
          watch_end(*entry, now, losses);
          continue;
        }
        if (now >= entry->hold_deadline) {
          // max_hold reached: no more renewals; report the loss once the
          // lease has run out.
          if (now >= entry->lease_expires) {
            entry->active = false;
            losses.push_back({entry->signal, LossReason::max_hold, "maximum hold time reached; renewal stopped"});
          } else {
            entry->next_due = entry->lease_expires;
            entry->hold_deadline = entry->lease_expires;
          }
          continue;
        }
        if (entry->client) batches[entry->client.get()].push_back(entry.get());
        else singles.push_back(entry.get());
        held.push_back(std::move(entry_lock));
      }
      for (auto& [client, entries] : batches) renew_pipelined(*client, entries, losses);
      for (RenewalEntry* entry : singles) {
        const auto sent_at = Clock::now();
        const std::uint64_t ticket = entry->signal->renewal_ticket();
        RenewResult result = RenewResult::io_error;
        try {
          result = entry->renew();
        } catch (...) {
        }
        settle(*entry, result, sent_at, ticket, losses);
      }
    }
    // No entry mutex is held any more: callbacks may unlock other locks.
    for (PendingLoss& loss : losses) loss.signal->declare_lost(loss.reason, loss.detail);
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<RenewalEntry>> entries_;
  // When the thread will next look at the entries by itself. add() wakes it
  // only for an entry due earlier, so a lock/unlock loop costs no thread
  // wake-up per acquisition.
  Clock::time_point planned_wake_ = Clock::time_point::min();
  // add() drops stopped entries once the vector reaches this size.
  std::size_t compact_at_ = 256;
  bool stopping_ = false;
  bool running_ = false;
  std::shared_ptr<ClientImpl> check_client_;  // set once, taken by run()
  std::string check_key_;
  std::thread thread_;
};

Watchdog& Watchdog::instance() {
  // OpenSSL first, configuration included, on the caller's thread. Exit-time
  // handlers run in reverse order of registration, so OpenSSL's cleanup then
  // runs after this object's destructor joined the threads. And a renewal
  // thread must not be the one that loads OpenSSL's configuration: the error
  // state OpenSSL allocates for that thread during loading is never freed
  // (LeakSanitizer reported it at exit, after a renewal computed a script's
  // SHA1 first).
  static const int openssl_ready = OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr);
  static Watchdog watchdog;
  (void)openssl_ready;
  return watchdog;
}

Watchdog::Watchdog() : lanes_([] { return std::make_unique<Lanes>(); }) {}

Watchdog::~Watchdog() {
  Lanes* current = lanes_.here();
  if (current == nullptr) return;
  std::map<std::string, std::shared_ptr<Lane>> lanes;
  {
    std::lock_guard lock(current->mutex);
    lanes.swap(current->by_server);
  }
  lanes.clear();  // joins every lane's thread before the Lanes go
}

void Watchdog::add(std::shared_ptr<RenewalEntry> entry) {
  entry->generation = fork_generation();
  Lanes& all = lanes();
  std::shared_ptr<Lane> lane;
  {
    std::lock_guard lock(all.mutex);
    // One lane per server, so a stalled one delays nobody else: on a
    // cluster, the master serving the key when the entry is added.
    std::string server = entry->client ? entry->client->endpoint() : entry->lane;
    if (entry->client && entry->client->options().deployment == Deployment::cluster) {
      try {
        server = entry->client->node_for(entry->name)->endpoint();
      } catch (...) {
      }
    }
    auto& slot = all.by_server[server];
    if (!slot) {
      slot = std::make_shared<Lane>();
      if (entry->client) slot->check_eviction_first(entry->client, entry->name);
    }
    lane = slot;
  }
  lane->add(std::move(entry));
}

std::shared_ptr<RenewalEntry> Watchdog::watch_lease_end(std::string name, std::shared_ptr<LeaseSignal> signal) {
  auto entry = std::make_shared<RenewalEntry>();
  entry->name = std::move(name);
  entry->renews = false;
  entry->lane = std::string(kUnrenewedLane);
  entry->next_due = signal->lease_end();
  entry->lease_expires = entry->next_due;
  entry->signal = std::move(signal);
  add(entry);
  return entry;
}

void Watchdog::stop(RenewalEntry& entry) noexcept {
  if (entry.generation != fork_generation()) return;  // the parent's, in a child
  std::lock_guard lock(entry.mutex);
  entry.active = false;
}

}  // namespace lockon::detail
