#include "run_command.hpp"

#include <sys/random.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "child.hpp"
#include "exit_codes.hpp"
#include "node_tally.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"
#include "lockon/multi_lock.hpp"
#include "lockon/options.hpp"
#include "lockon/redlock.hpp"
#include "lockon/shared_lease.hpp"
#include "report.hpp"
#include "run_settings.hpp"
#include "servers.hpp"
#include "signals.hpp"
#include "status_view.hpp"

namespace lockon::cli {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// 128 random bits in hex, as lockon would pick; chosen here so --verbose can
// show its first characters (which `lockon status` shows too).
std::string random_token() {
  unsigned char bytes[16];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    filled += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 0xF];
  }
  return token;
}

// Who holds `name` (-v only, one server, one name): the holder record, if
// it names the current token. Best effort, one round trip; nothing when the
// holder keeps no record or the key changed hands meanwhile (issue 35 §8:
// -v said "held by another owner" without the record it could read).
std::string holder_of(const Servers& servers, const RunOptions& options, Reporter& reporter) {
  if (!reporter.verbose() || servers.size() != 1 || options.names.size() > 1) return {};
  try {
    const Client client = servers.clients().front();
    const auto replies = client.pipeline({{"GET", options.name}, {"GET", lock_companion_key(options.name, "who")}});
    if (replies.at(0).is_nil() || replies.at(1).is_nil()) return {};
    const std::string& token = replies[0].as_string();
    reporter.redactor().add_token(token);
    const std::optional<HolderRecord> record = parse_holder_record(replies[1].as_string());
    if (!record || record->token_prefix.empty() || token.rfind(record->token_prefix, 0) != 0) return {};
    return " (" + describe_who(*record) + ")";
  } catch (const std::exception&) {
    return {};
  }
}

std::string reason_text(LossReason reason) {
  switch (reason) {
    case LossReason::taken: return "the key expired, was deleted or was taken";
    case LossReason::unreachable: return "Redis was unreachable until the lease could have lapsed";
    case LossReason::max_hold: return "maximum hold time reached";
  }
  return "lost";
}

// Filled by lockon's watchdog thread (on_lost), read by the main thread.
struct LossState {
  std::atomic<bool> lost{false};
  std::mutex mutex{};
  std::string detail{};
  Wakeup* wake = nullptr;

  std::string describe() {
    std::lock_guard guard(mutex);
    return detail;
  }
};

enum class Outcome { acquired, conflict, timed_out };

// The acquisition runs on its own thread; the main thread meanwhile waits for
// it or for a signal. Every lockon thread it creates inherits the blocked
// signal mask.
struct Acquisition {
  std::unique_ptr<DistributedLock> lock{};
  Outcome outcome = Outcome::conflict;
  std::exception_ptr error{};
  milliseconds took{0};
  std::atomic<bool> done{false};
};

// --shared / --exclusive / --permits N: a side of the read-write lock NAME
// or a permit of the semaphore NAME instead of the lock itself (one server:
// shares have no Redlock form). The run's random token names the share, so
// --verbose shows its prefix as for a lock.
std::unique_ptr<DistributedLock> make_run_lock(const Servers& servers, const RunOptions& options,
                                               LockOptions lock_options, RedlockOptions redlock_options) {
  if (options.names.size() > 1) {
    // All names or none, in sorted order (lockon/multi_lock.hpp).
    return std::make_unique<MultiLock>(options.names, std::move(lock_options),
                                       [&servers, redlock_options](std::string key, LockOptions per_key) {
                                         return servers.make_lock(key, std::move(per_key), redlock_options);
                                       });
  }
  if (!options.shared && !options.exclusive && options.permits == 0)
    return servers.make_lock(options.name, std::move(lock_options), std::move(redlock_options));
  if (servers.size() != 1) throw ConfigError("--shared, --exclusive and --permits need a single server (one --url)");
  if (options.shared) return SharedLeaseLock::reader(servers.clients().front(), options.name, std::move(lock_options));
  if (options.exclusive)
    return SharedLeaseLock::writer(servers.clients().front(), options.name, std::move(lock_options));
  return SharedLeaseLock::permit(servers.clients().front(), options.name, options.permits, std::move(lock_options));
}

void acquire(Acquisition& a, const Servers& servers, const RunOptions& options, const RunSettings& settings,
             LockOptions lock_options, RedlockOptions redlock_options, Wakeup& wake) {
  const auto start = Clock::now();
  try {
    a.lock = make_run_lock(servers, options, std::move(lock_options), std::move(redlock_options));
    bool ok = false;
    if (options.nonblock) {
      ok = a.lock->try_lock();
    } else if (settings.wait) {
      ok = a.lock->try_lock_for(*settings.wait);
    } else {
      a.lock->lock();
      ok = true;
    }
    a.outcome = ok ? Outcome::acquired : (options.nonblock ? Outcome::conflict : Outcome::timed_out);
  } catch (...) {
    a.error = std::current_exception();
  }
  a.took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  a.done.store(true);
  wake.notify();
}

std::string command_text(const std::vector<std::string>& command) {
  std::string text = command.front();
  if (command.size() > 1) text += " ...";
  return text;
}

struct ChildEnd {
  int wait_status = 0;
  bool lost_while_running = false;
};

// Waits for COMMAND, forwarding signals and reacting to a lost lease.
ChildEnd supervise(pid_t pid, SignalRelay& signals, Wakeup& wake, LossState& loss, const RunOptions& options,
                   const RunSettings& settings, const Reporter& reporter, const std::string& where) {
  ChildEnd end;
  bool kill_pending = false;  // SIGTERM sent for a lost lease, SIGKILL due at kill_at
  Clock::time_point kill_at{};
  const std::string who = "COMMAND (" + command_text(options.command) + ", pid " + std::to_string(pid) + ")";
  while (true) {
    const pid_t r = ::waitpid(pid, &end.wait_status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      reporter.error(std::string("waitpid: ") + std::strerror(errno));
      end.wait_status = 0;
      break;
    }
    for (const auto& received : signals.take()) {
      if (!received.forward) {
        reporter.info(signal_name(received.signal) + " from the terminal reached " + who + " too; not forwarding");
        continue;
      }
      reporter.info("forwarding " + signal_name(received.signal) + " to " + who);
      ::kill(pid, received.signal);
    }
    if (!end.lost_while_running && loss.lost.load()) {
      end.lost_while_running = true;
      const std::string what = "lost lock '" + options.name + "' on " + where + ": " + loss.describe();
      if (options.on_lost == OnLost::term) {
        reporter.error(what + "; terminating " + who);
        ::kill(pid, SIGTERM);
        kill_at = Clock::now() + settings.kill_after;
        kill_pending = true;
      } else {
        reporter.error(what + "; " + who + " keeps running (--on-lost=ignore)");
      }
    }
    if (kill_pending && Clock::now() >= kill_at) {
      reporter.info(who + " outlived --kill-after; sending SIGKILL");
      ::kill(pid, SIGKILL);
      kill_pending = false;
    }
    milliseconds timeout{1000};  // a safety net: SIGCHLD and the pipe wake us anyway
    if (kill_pending) {
      timeout = std::min(timeout, std::chrono::ceil<milliseconds>(kill_at - Clock::now()));
    }
    signals.wait(wake, timeout);
    wake.drain();
  }
  return end;
}

}  // namespace

int run_command(const RunOptions& options) {
  Reporter reporter(options.verbose);
  const RunSettings settings = validate_run_options(options);
  const Servers servers(options.servers, reporter);
  const std::string where = servers.describe();
  const std::string token = random_token();
  reporter.redactor().add_token(token);

  // Before any thread exists (lockon's threads start with the first lock).
  SignalRelay signals;
  Wakeup wake;
  auto loss = std::make_shared<LossState>();
  loss->wake = &wake;

  LockOptions lock_options;
  lock_options.ttl = settings.ttl;
  lock_options.fencing = !options.fence_env.empty();
  lock_options.replica_acks = {options.replicas, settings.replica_timeout};
  lock_options.token = token;
  lock_options.holder_label = options.label;
  lock_options.on_lost = [loss](const LossEvent& event) {
    {
      std::lock_guard guard(loss->mutex);
      loss->detail = reason_text(event.reason) + " (" + event.detail + ")";
    }
    loss->lost.store(true);
    loss->wake->notify();
  };
  RedlockOptions redlock_options;
  auto tally = std::make_shared<NodeTally>();
  if (reporter.verbose()) {
    redlock_options.on_node_event = [&reporter, tally](const NodeEvent& e) {
      tally->record(e);
      if (e.ok() && e.operation == NodeOperation::extend) return;  // routine renewals
      reporter.info("node " + e.endpoint + " " + std::string(to_string(e.operation)) + ": " +
                    std::string(to_string(e.outcome)) + " (" + e.detail + ")");
    };
  }

  reporter.info("acquiring '" + options.name + "' on " + where + " (ttl " + format_duration_ms(settings.ttl.count()) +
                (options.nonblock ? ", no waiting"
                 : settings.wait ? ", waiting at most " + format_duration_ms(settings.wait->count())
                                 : ", waiting as long as it takes") +
                ")");
  Acquisition acquisition;
  std::thread worker(acquire, std::ref(acquisition), std::cref(servers), std::cref(options), std::cref(settings),
                     std::move(lock_options), std::move(redlock_options), std::ref(wake));
  std::optional<int> pending_signal;
  while (!acquisition.done.load()) {
    signals.wait(wake, std::nullopt);
    wake.drain();
    for (const auto& received : signals.take()) {
      if (!acquisition.done.load()) {
        // Cannot interrupt a blocking acquisition: end the process as the
        // signal would. Nothing is held, or the lock expires by its TTL.
        reporter.info(signal_name(received.signal) + " while acquiring '" + options.name + "'; giving up");
        SignalRelay::die_by(received.signal);
      }
      pending_signal = received.signal;
    }
  }
  worker.join();
  DistributedLock* lock = acquisition.lock.get();

  if (acquisition.error) return report_failure(reporter, "cannot acquire '" + options.name + "'", acquisition.error);
  if (acquisition.outcome == Outcome::conflict) {
    reporter.info("'" + options.name + "' is held by another owner on " + where + holder_of(servers, options, reporter));
    return options.conflict_exit_code;
  }
  if (acquisition.outcome == Outcome::timed_out) {
    reporter.info("gave up waiting for '" + options.name + "' on " + where + " after " +
                  format_duration_ms(acquisition.took.count()));
    return exit_code::timed_out;
  }
  reporter.info("acquired '" + options.name + "' on " +
                (servers.size() > 1 ? tally->summary(servers.size()) : where) + " in " +
                format_duration_ms(acquisition.took.count()) +
                " (token " + token_prefix(token) + "..." +
                (options.fence_env.empty() ? std::string() : ", fence " + std::to_string(lock->fence())) + ")");

  // A signal that arrived while the lock was being granted: honour it now.
  signals.wait(wake, milliseconds(0));
  for (const auto& received : signals.take()) pending_signal = received.signal;
  if (pending_signal) {
    lock->unlock();
    reporter.info(signal_name(*pending_signal) + " before COMMAND started; released '" + options.name + "'");
    SignalRelay::die_by(*pending_signal);
  }

  std::vector<std::string> extra_env;
  if (!options.fence_env.empty()) extra_env.push_back(options.fence_env + "=" + std::to_string(lock->fence()));
  if (const auto* multi = dynamic_cast<const MultiLock*>(lock); multi != nullptr && !options.fence_env.empty()) {
    // One fence per name: VAR_1 for NAME1 (also VAR), VAR_2 for NAME2...
    for (std::size_t i = 0; i < multi->size(); ++i)
      extra_env.push_back(options.fence_env + "_" + std::to_string(i + 1) + "=" + std::to_string(multi->fence(i)));
  }
  int spawn_error = 0;
  const pid_t pid = spawn_command(options.command, extra_env, signals.reset_in_child(), spawn_error);
  if (pid < 0) {
    lock->unlock();
    const bool missing = spawn_error == ENOENT || spawn_error == ENOTDIR;
    reporter.error(options.command.front() + ": " +
                   (missing ? std::string("command not found") : "cannot execute: " + std::string(std::strerror(spawn_error))));
    return missing ? exit_code::not_found : exit_code::cannot_execute;
  }
  reporter.info("started " + command_text(options.command) + " (pid " + std::to_string(pid) + ")");

  const ChildEnd end = supervise(pid, signals, wake, *loss, options, settings, reporter, where);
  lock->unlock();
  bool lost_at_release = false;
  // What the release did, said as it is: after a lost lease nothing of
  // ours was left to release (issue 35 §8: it said "released").
  std::string release_outcome = "released '" + options.name + "'";
  if (const std::exception_ptr failure = lock->last_unlock_error()) {
    try {
      std::rethrow_exception(failure);
    } catch (const LockNotOwned&) {
      lost_at_release = true;
      release_outcome = "'" + options.name + "' was no longer ours: nothing released";
    } catch (const std::exception& e) {
      reporter.error("could not release '" + options.name + "' (it expires within " +
                     format_duration_ms(settings.ttl.count()) + "): " + e.what());
      release_outcome = "'" + options.name + "' not released";
    }
  }
  reporter.info("COMMAND " + describe_status(end.wait_status) + "; " + release_outcome);

  if (lost_at_release && !end.lost_while_running) {
    reporter.error("lock '" + options.name + "' on " + where + " was lost while COMMAND ran (found when releasing: " +
                   "the key expired, was deleted or was taken)");
  }
  if ((end.lost_while_running || lost_at_release) && options.on_lost == OnLost::term) return exit_code::lost;
  return shell_status(end.wait_status);
}

}  // namespace lockon::cli
