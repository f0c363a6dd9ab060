// unit/scripted_lock_port.hpp — a lock port (core/fast_path.hpp,
// core/wait_attempt.hpp) that answers each write with the next scripted
// step and records what the core wrote and asked of it.
#pragma once

#include <deque>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/inline_task.hpp"
#include "core/fast_path.hpp"
#include "lockon/errors.hpp"
#include "resp_reply.hpp"

namespace lockon::detail::core::scripted {

// Each send answers with the next scripted step: RESP replies (one per
// command), no answer by the deadline, a cancellation, or an exception.
struct Step {
  std::vector<std::string> replies;
  Sent::Ended ended = Sent::Ended::replied;
  std::function<void()> fails;
};

inline Step answer(std::vector<std::string> replies) {
  Step step;
  step.replies = std::move(replies);
  return step;
}
inline Step no_answer(Sent::Ended ended) {
  Step step;
  step.ended = ended;
  return step;
}
inline Step lost_connection() {
  Step step;
  step.fails = [] { throw ClosedError("connection lost"); };
  return step;
}

struct ScriptedLockPort {
  template <class T>
  using Task = InlineTask<T>;

  std::deque<Step> steps;
  bool cluster = false;
  std::vector<std::vector<std::string>> writes;  // each write's commands, joined by spaces
  std::vector<bool> abandoned;                   // each abandon's outcome_unknown
  int records_dropped = 0;
  int records_replaced = 0;
  int publish_warnings = 0;

  Task<Sent> send(std::span<const std::span<const std::string_view>> commands, Clock::time_point) {
    std::vector<std::string> write;
    for (const auto& command : commands) {
      std::string joined;
      for (const std::string_view arg : command) joined += (joined.empty() ? "" : " ") + std::string(arg);
      write.push_back(joined);
    }
    writes.push_back(write);
    return answer_next();
  }
  Task<Sent> answer_next() {
    if (steps.empty()) throw std::logic_error("unscripted write");
    Step step = std::move(steps.front());
    steps.pop_front();
    if (step.fails) step.fails();
    Sent sent;
    sent.ended = step.ended;
    for (const std::string& reply : step.replies) sent.replies.push_back(test_resp::parse(reply));
    co_return sent;
  }
  Task<Sent> run_wait_attempt(std::span<const std::string_view> argv, Clock::time_point) {
    std::string joined;
    for (const std::string_view arg : argv) joined += (joined.empty() ? "" : " ") + std::string(arg);
    writes.push_back({joined});
    return answer_next();
  }
  void warn_publish_denied() { ++publish_warnings; }
  void abandon(bool outcome_unknown) { abandoned.push_back(outcome_unknown); }
  Task<void> drop_record() noexcept {
    ++records_dropped;
    co_return;
  }
  Task<void> replace_stale_record(Clock::time_point) noexcept {
    ++records_replaced;
    co_return;
  }
  bool sharded() const noexcept { return cluster; }
  const std::string& endpoint() const noexcept { return endpoint_; }
  [[noreturn]] void throw_token_in_use() const { throw LockError("token in use", "K"); }

 private:
  std::string endpoint_ = "127.0.0.1:6379";
};

}  // namespace lockon::detail::core::scripted
