// A caller's pipeline (Client::pipeline) on Redis Cluster, resending only
// what a slot migration refused.
//
// During a migration the source runs the commands whose keys it still has
// and answers ASK (TRYAGAIN for a multi-key command over keys it has only
// some of) for the others; a MOVED or CLUSTERDOWN refuses every keyed
// command while keyless ones (PING, PUBLISH) run. Resending the pipeline
// whole ran the commands that had run a second time, on the target
// (INCR a, INCR b, INCR c with only b moved answered 1, 21, 1: a and c were
// created again on the target). So routed_call (routed.hpp, the one place
// that follows redirections) is given, on each attempt, only the commands
// still refused, and every reply is kept in its own position.
//
// What is resent together (a "unit"):
//   - a transaction, MULTI ... EXEC/DISCARD, whole: a refused command in it
//     makes EXEC answer EXECABORT (a refused EXEC discards it), so nothing
//     of it ran; its commands alone would run outside the transaction;
//   - every other command on its own;
//   - WAIT / WAITAOF that ran after a refused command is sent again after
//     it: it waits for the writes before it, which now run elsewhere (it
//     changes nothing, so running it twice is harmless).
// A pipeline holding WATCH is never resent in part: a WATCH alone on the
// target would stay live on a pooled connection, and the transaction it
// guards ran (or not) on the source already. Its replies are returned as
// they are, and the connection reconnects on its next use (routed_pipeline()).
// Everything refused (nothing ran) is resent whole, as before.
//
// A WAIT that ran on several nodes answers the fewest acknowledgments any
// of them reported (WAITAOF: per count): each covers only the writes sent
// to its node, and the caller reads the answer as covering every write
// before the WAIT. Replacing the source's answer with the target's showed
// SET a acknowledged when only SET b was.
//
// Once something ran, routed_pipeline decides every error itself: the
// caller must not take it for "retry the pipeline" (see the_rest_failed).
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/routed.hpp"

namespace lockon::detail {

class PipelineResends {
 public:
  using Command = std::span<const std::string_view>;

  explicit PipelineResends(std::span<const Command> commands);

  /// The commands to send on the next attempt: all at first, then the units
  /// still refused, in their original order.
  std::vector<Command> batch() const;
  bool holds_watch() const noexcept { return holds_watch_; }

  /// Takes one attempt's replies (one per batch() command, in order), from
  /// the node at `endpoint`. The replies of what ran go to their positions;
  /// returned are those of the units to send again, in batch order — for
  /// routed_call, which follows the first redirection among them. Empty:
  /// nothing to send again (all ran, or a pipeline with WATCH was refused in
  /// part).
  std::vector<ReplyPtr> record(std::vector<ReplyPtr> replies, std::string_view endpoint);

  /// Every reply in its position, once routed_call is done; `last` is what
  /// it returned (the refused units' replies when it gave up, else empty).
  /// Throws ProtocolError if a reply is missing, and ReplyError (the first
  /// refused command's code: ASK, MOVED, TRYAGAIN, CLUSTERDOWN) when a
  /// command stayed refused while another ran: sending the pipeline again
  /// whole would run that one twice.
  std::vector<ReplyPtr> finish(std::vector<ReplyPtr> last);

  /// routed_call threw `error` on an attempt. Nothing ran before it: thrown
  /// as is. Else the resend failed after other commands ran, which the
  /// error's own meaning would hide (ConnectError, PoolTimeoutError,
  /// ServerBusyError: "nothing was sent, retry"):
  ///   - nothing of the resend was sent (those three): the ReplyError of
  ///     finish(), naming the refused command, and the failure;
  ///   - it may have been sent (another IoError): the same IoError class,
  ///     its message saying that other commands ran and that the resent
  ///     ones' outcome is unknown;
  ///   - anything else (a handshake's AuthError, ...) as is.
  [[noreturn]] void the_rest_failed(std::exception_ptr error) const;

 private:
  [[noreturn]] void throw_refused(std::string_view why_not_run) const;

  std::span<const Command> commands_;
  std::vector<std::size_t> unit_of_;  // per command: the unit it is resent with
  std::vector<std::size_t> pending_;  // commands of the next batch
  std::vector<ReplyPtr> replies_;     // per command, once final
  // WAIT / WAITAOF: the fewest acknowledgments reported so far, per count
  // (WAIT one, WAITAOF two); empty until one ran.
  std::vector<std::vector<long long>> acks_;
  bool holds_watch_ = false;
  bool ran_ = false;  // some unit ran on some attempt
  // The first command of the last refusal, its reply's text and the node.
  std::size_t refused_ = 0;
  std::string refusal_;
  std::string refused_at_;
};

/// Client::pipeline's routing: `send(Connection&, Node&, std::span<const
/// PipelineResends::Command> batch)` appends the batch and reads one reply
/// per command. On Redis Cluster only what was refused is resent, as above,
/// and an error after part of the pipeline ran is thrown as
/// PipelineResends::finish / the_rest_failed say; on one server or Sentinel
/// it is routed_call as is (a READONLY reply is reported to the topology
/// there).
template <class Send>
std::vector<ReplyPtr> routed_pipeline(ClientImpl& client, std::string_view key,
                                      std::chrono::steady_clock::time_point until,
                                      std::span<const PipelineResends::Command> commands, Send&& send) {
  if (client.options().deployment != Deployment::cluster)
    return routed_call(client, key, until, [&](Connection& connection, Node& node) {
      return send(connection, node, commands);
    });
  PipelineResends resends(commands);
  std::vector<ReplyPtr> last;
  try {
    last = routed_call(client, key, until, [&](Connection& connection, Node& node) {
      const std::vector<PipelineResends::Command> batch = resends.batch();
      std::vector<ReplyPtr> replies = send(connection, node, std::span<const PipelineResends::Command>(batch));
      // The pipeline closes its WATCH itself, and Redis unwatches on EXEC,
      // EXECABORT and a refused EXEC; a new session on the connection's next
      // use makes sure no WATCH outlives a refusal on a pooled connection (a
      // rare path; an UNWATCH here could fail after the pipeline ran).
      if (resends.holds_watch() && first_redirect(replies) != nullptr) connection.mark_broken();
      return resends.record(std::move(replies), node.endpoint());
    });
  } catch (...) {
    resends.the_rest_failed(std::current_exception());
  }
  return resends.finish(std::move(last));
}

}  // namespace lockon::detail
