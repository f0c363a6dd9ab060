// How the single-instance lock talks to its server: one request on a pooled
// connection, optionally bounded by the caller's deadline, with error
// replies mapped in one place and abandoned attempts handed to Orphans.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client_impl.hpp"
#include "client/hiredis_handles.hpp"
#include "client/script.hpp"
#include "protocol/lock_scripts.hpp"

namespace lockon::detail {

/// Reads the pending reply on `connection`, waiting at most the socket
/// timeout or `until`, whichever comes first; null when `until` passed
/// first (the outcome of the request is then unknown).
/// EVALSHA on `connection` (sent, then its reply read with read_bounded),
/// redone with EVAL when the server answers NOSCRIPT (first use, restart),
/// read the same way. Null when `until` passed first (the outcome of the
/// EVALSHA or EVAL sent last is then unknown).
ReplyPtr eval_bounded(Connection& connection, const Script& script, std::span<const std::string_view> keys,
                      std::span<const std::string_view> args, std::string_view operation,
                      std::chrono::steady_clock::time_point until);

/// `server_wait`: how long the server itself may hold the reply back (WAIT's
/// timeout); the socket timeout then counts from when that may have ended.
ReplyPtr read_bounded(Connection& connection, std::string_view operation, std::chrono::steady_clock::time_point until,
                      std::chrono::milliseconds server_wait = std::chrono::milliseconds(0));

class LockCalls {
 public:
  using Clock = std::chrono::steady_clock;

  LockCalls(std::shared_ptr<ClientImpl> client, std::string name);

  const std::string& name() const noexcept { return keys_[0]; }
  const std::string& queue_key() const noexcept { return keys_[1]; }
  const std::string& fence_key() const noexcept { return keys_[2]; }
  const std::string& record_key() const noexcept { return keys_[3]; }
  /// The holder record (protocol/holder_record.hpp).
  const std::string& who_key() const noexcept { return keys_[4]; }
  /// Every key of the queue scripts, in KEYS order (lock_script_keys()).
  const LockScriptKeys& keys() const noexcept { return keys_; }
  const std::shared_ptr<ClientImpl>& client() const noexcept { return client_; }
  /// Whether wake-ups go over sharded pub/sub (a cluster): pass it to the
  /// hand-over scripts (scripts::wait_attempt(sharded()), ...).
  bool sharded() const noexcept { return sharded_; }

  /// Runs `script` with the lock's script keys (lock_script_keys(): lock,
  /// queue, fence, hand-over record, holder records) and returns the reply;
  /// error replies are thrown (mapped).
  ReplyPtr run_lock_script(const Script& script, std::span<const std::string_view> args, std::string_view operation);
  /// Runs `script` with the lock key and the holder record key.
  ReplyPtr run1(const Script& script, std::span<const std::string_view> args, std::string_view operation);
  /// As run1, with the hand-over subscriber record ({K}:hs) as a third key
  /// and this process's subscriber id on the lock's server appended to
  /// `args` ("" when it has none): for scripts that keep that record alive
  /// while it names the caller's process (scripts::renew(), extend()).
  ReplyPtr run1_as_process(const Script& script, std::span<const std::string_view> args, std::string_view operation);
  /// The same, its reply awaited until `until` at most: null when it passed first.
  ReplyPtr run1_as_process_until(const Script& script, std::span<const std::string_view> args,
                                 std::string_view operation, Clock::time_point until);
  /// One plain command; error replies are thrown.
  ReplyPtr command(std::span<const std::string_view> args, std::string_view operation);

  /// As run_lock_script/command, but returns null when `until` passes before the reply
  /// arrives (the request's outcome is then unknown: it may still execute).
  /// A reply is waited for at most the socket timeout as usual; `until` is
  /// the earlier bound when it comes first. until == time_point::max():
  /// no extra bound.
  ReplyPtr run_lock_script_until(const Script& script, std::span<const std::string_view> args, std::string_view operation,
                      Clock::time_point until);
  ReplyPtr command_until(std::span<const std::string_view> args, std::string_view operation, Clock::time_point until);

  /// Sends `commands` in one write and reads every reply, each wait bounded
  /// like run_lock_script_until. Error replies are returned, not thrown: all replies
  /// are read before the caller looks at any. Empty when `until` passed
  /// before all replies arrived (outcome unknown). `last_waits`: the last
  /// command is held back by the server for up to this long (WAIT n ms), so
  /// its reply may take the socket timeout plus that.
  /// Redirections: resent whole only when every keyed command was refused
  /// (MOVED, ASK, TRYAGAIN; a keyless WAIT then goes along, to the node that
  /// runs the writes). When some ran and some were refused (a slot being
  /// migrated) the replies are returned as they are, redirections included:
  /// resending would run the commands that ran a second time, elsewhere.
  std::vector<ReplyPtr> pipeline_until(std::span<const std::span<const std::string_view>> commands,
                                       std::string_view operation, Clock::time_point until,
                                       std::chrono::milliseconds last_waits = std::chrono::milliseconds(0));

  /// Hands `entry` (see lock_scripts.hpp) to the background clean-up: its
  /// queue place is removed and, if the key holds its token, the lock is
  /// passed on. Never throws.
  void abandon(const std::string& entry, bool unknown_outcome) const noexcept;

  /// Tries the clean-up now, waiting at most `grace` for the reply; hands it
  /// to the background on any failure, and also after a success when
  /// `late_request`: a request of ours with `entry` whose reply was never
  /// read may still run after this clean-up (it went out on a connection
  /// since closed, and the server serves connections in no set order), so
  /// the background sweeps again. Returns the script's reply, or -1.
  long long cancel_now(const std::string& entry, std::chrono::milliseconds grace, bool late_request = false) noexcept;

 private:
  std::shared_ptr<ClientImpl> client_;
  LockScriptKeys keys_;
  bool sharded_ = false;
};

}  // namespace lockon::detail
