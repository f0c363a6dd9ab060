#include "client/routed_pipeline.hpp"

#include <algorithm>
#include <string>

#include "client/asking.hpp"
#include "lockon/errors.hpp"

namespace lockon::detail {
namespace {

bool is_wait(const PipelineResends::Command& command) noexcept {
  return !command.empty() && (command_is(command[0], "WAIT") || command_is(command[0], "WAITAOF"));
}

// WAIT's count, or WAITAOF's two, lowered to (and recorded in) `fewest`:
// the acknowledgments of every node this WAIT ran on (file comment).
void keep_fewest(std::vector<long long>& fewest, redisReply& reply) {
  std::vector<redisReply*> counts;
  if (reply.type == REDIS_REPLY_INTEGER) counts.push_back(&reply);
  else if (reply.type == REDIS_REPLY_ARRAY)
    for (std::size_t k = 0; k < reply.elements; ++k)
      if (reply.element[k]->type == REDIS_REPLY_INTEGER) counts.push_back(reply.element[k]);
      else return;  // not a count: left as it is
  else return;  // an error reply: it says so itself
  if (fewest.empty()) fewest.resize(counts.size(), -1);
  if (fewest.size() != counts.size()) return;  // never: the same command each time
  for (std::size_t k = 0; k < counts.size(); ++k) {
    if (fewest[k] >= 0) counts[k]->integer = std::min(counts[k]->integer, fewest[k]);
    fewest[k] = counts[k]->integer;
  }
}

std::string name_of(const PipelineResends::Command& command) {
  return command.empty() ? std::string("command") : std::string(command[0]);
}

}  // namespace

PipelineResends::PipelineResends(std::span<const Command> commands)
    : commands_(commands),
      unit_of_(commands.size()),
      pending_(commands.size()),
      replies_(commands.size()),
      acks_(commands.size()) {
  std::size_t unit = 0;
  bool in_multi = false;
  for (std::size_t i = 0; i < commands.size(); ++i) {
    pending_[i] = i;
    const std::string_view name = commands[i].empty() ? std::string_view() : commands[i][0];
    if (command_is(name, "WATCH")) holds_watch_ = true;
    if (in_multi) {
      // Part of the open transaction: same unit; EXEC or DISCARD ends it.
      unit_of_[i] = unit;
      if (command_is(name, "EXEC") || command_is(name, "DISCARD")) in_multi = false;
      continue;
    }
    unit_of_[i] = ++unit;
    in_multi = command_is(name, "MULTI");
  }
}

std::vector<PipelineResends::Command> PipelineResends::batch() const {
  std::vector<Command> batch;
  batch.reserve(pending_.size());
  for (const std::size_t i : pending_) batch.push_back(commands_[i]);
  return batch;
}

std::vector<ReplyPtr> PipelineResends::record(std::vector<ReplyPtr> replies, std::string_view endpoint) {
  if (replies.size() != pending_.size())
    throw ProtocolError("pipeline: " + std::to_string(replies.size()) + " replies to " +
                        std::to_string(pending_.size()) + " commands");
  for (std::size_t k = 0; k < replies.size(); ++k)
    if (replies[k] && is_wait(commands_[pending_[k]])) keep_fewest(acks_[pending_[k]], *replies[k]);
  // Units refused on this attempt (unit numbers start at 1).
  std::vector<bool> refused(unit_of_.empty() ? 1 : unit_of_.back() + 1, false);
  bool any_refused = false;
  for (std::size_t k = 0; k < replies.size(); ++k)
    if (first_redirect(replies[k]) != nullptr) refused[unit_of_[pending_[k]]] = any_refused = true;
  bool refused_before = false;
  bool any_ran = false;
  for (const std::size_t i : pending_) {
    const std::size_t unit = unit_of_[i];
    if (refused[unit]) refused_before = true;
    else if (refused_before && is_wait(commands_[i])) refused[unit] = true;
    else any_ran = true;
  }
  ran_ = ran_ || any_ran;
  // Nothing refused, or a pipeline with WATCH refused in part: final.
  const bool final = !any_refused || (holds_watch_ && ran_);
  std::vector<std::size_t> next;
  std::vector<ReplyPtr> again;
  bool named = false;  // the first refusal of this attempt is kept for errors
  for (std::size_t k = 0; k < replies.size(); ++k) {
    const std::size_t i = pending_[k];
    if (!named && refused[unit_of_[i]])
      if (const redisReply* redirect = first_redirect(replies[k])) {
        refused_ = i;
        refusal_.assign(redirect->str, redirect->len);
        refused_at_ = endpoint;
        named = true;
      }
    if (!final && refused[unit_of_[i]]) {
      next.push_back(i);
      again.push_back(std::move(replies[k]));
    } else {
      replies_[i] = std::move(replies[k]);
    }
  }
  pending_ = std::move(next);
  return again;
}

std::vector<ReplyPtr> PipelineResends::finish(std::vector<ReplyPtr> last) {
  // `last` went through record() (WAIT counts included) before routed_call
  // handed it back.
  if (last.size() == pending_.size())
    for (std::size_t k = 0; k < last.size(); ++k) replies_[pending_[k]] = std::move(last[k]);
  for (const ReplyPtr& reply : replies_)
    if (!reply) throw ProtocolError("pipeline: a command's reply is missing");
  // Name the first refused command in the caller's order.
  for (std::size_t i = 0; ran_ && i < replies_.size(); ++i)
    if (const redisReply* redirect = first_redirect(replies_[i])) {
      // Every refusal left came from the last attempt, so from refused_at_.
      refused_ = i;
      refusal_.assign(redirect->str, redirect->len);
      throw_refused(holds_watch_ ? "it did not run and was not resent (a pipeline holding WATCH is never resent in part)"
                                 : "it did not run, and was refused again until the time bound");
    }
  return std::move(replies_);
}

void PipelineResends::the_rest_failed(std::exception_ptr error) const {
  if (!ran_ || refusal_.empty()) std::rethrow_exception(error);
  // The error names the node it happened on (it may fail before an
  // exchange starts, so the node is not known here).
  const auto unknown = [&](const std::exception& e) {
    return std::string(e.what()) + " (while resending " + name_of(commands_[refused_]) +
           ", which a cluster slot migration refused on " + refused_at_ + " (" + refusal_ +
           "): what was resent may or may not have run, while other commands of the pipeline ran: do not send the "
           "pipeline again whole)";
  };
  const auto not_sent = [](const std::exception& e) {
    return std::string("it did not run: resending it failed before anything was sent (") + e.what() + ")";
  };
  try {
    std::rethrow_exception(error);
  } catch (const ConnectError& e) {  // TlsError too: nothing was sent
    throw_refused(not_sent(e));
  } catch (const PoolTimeoutError& e) {
    throw_refused(not_sent(e));
  } catch (const ServerBusyError& e) {  // no master served the slot
    throw_refused(not_sent(e));
  } catch (const TimeoutError& e) {
    throw TimeoutError(unknown(e));
  } catch (const ClosedError& e) {
    throw ClosedError(unknown(e));
  } catch (const ProtocolError& e) {
    throw ProtocolError(unknown(e));
  } catch (const IoError& e) {
    throw IoError(unknown(e));
  }
}

void PipelineResends::throw_refused(std::string_view why_not_run) const {
  const std::string& text = refusal_;
  throw ReplyError(name_of(commands_[refused_]) + " on " + refused_at_ + ": refused during a cluster slot migration (" +
                       text + "); " + std::string(why_not_run) +
                       ", while other commands of the pipeline ran: do not send the pipeline again whole",
                   text.substr(0, text.find(' ')));
}

}  // namespace lockon::detail
