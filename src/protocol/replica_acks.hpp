// protocol/replica_acks.hpp — acknowledgement of a grant by replicas
// (LockOptions::replica_acks), for both fronts. No I/O.
//
// WAIT n timeout counts the replicas that have every write made so far on
// the connection it runs on. A grant made by that connection's own SET is
// covered directly (the blocking fast path sends WAIT in the same write).
// A grant written by another connection — a releaser's hand-over, a pooled
// connection, the Asio front's shared connection — is covered by a write of
// our own first: touch_grant() rewrites K in place while it holds our
// token, then WAIT on the same connection; replication is in order, so
// replicas that have our write have the grant before it.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "client/script.hpp"
#include "lockon/errors.hpp"
#include "lockon/lock.hpp"

namespace lockon::detail {

/// KEYS: K. ARGV: token. While K holds the token, SET K token KEEPTTL (a
/// write of this connection that changes nothing). 1 if K held it, else 0.
const Script& touch_grant();

/// "WAIT <replicas> <timeout ms>", owning its text.
class WaitCommand {
 public:
  explicit WaitCommand(const ReplicaAcks& acks)
      : replicas_(std::to_string(acks.replicas)), timeout_(std::to_string(acks.timeout.count())) {}
  std::array<std::string_view, 3> args() const noexcept { return {"WAIT", replicas_, timeout_}; }

 private:
  std::string replicas_;
  std::string timeout_;
};

/// The error after `acknowledged` of `acks.replicas` acknowledgements: the
/// caller has released (or handed to the clean-up) the grant first.
ReplicationError not_enough_replicas(const std::string& name, std::string_view endpoint, int acknowledged,
                                     const ReplicaAcks& acks);

}  // namespace lockon::detail
