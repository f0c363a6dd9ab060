#include "client/pipeline.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "lockon/errors.hpp"

namespace lockon::detail {

struct Pipeline::Request {
  // The caller's commands, alive while it waits; written adjacently.
  std::span<const std::span<const std::string_view>> commands;
  Clock::time_point deadline;
  std::string_view operation;
  std::vector<ReplyPtr> replies;
  std::exception_ptr error;
  bool done = false;
  std::condition_variable wake;
};

Pipeline::Pipeline(ConnectionOptions options) : connection_(std::move(options)) {}

std::uint64_t Pipeline::batches() const {
  std::lock_guard lock(mutex_);
  return batches_;
}

std::uint64_t Pipeline::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

ReplyPtr Pipeline::call(std::span<const std::string_view> args, Clock::time_point deadline,
                        std::string_view operation) {
  const std::array<std::span<const std::string_view>, 1> one{args};
  return std::move(call_many(one, deadline, operation).front());
}

std::vector<ReplyPtr> Pipeline::call_many(std::span<const std::span<const std::string_view>> commands,
                                          Clock::time_point deadline, std::string_view operation) {
  if (commands.empty()) return {};
  Request request{commands, deadline, operation, {}, nullptr, false, {}};
  request.replies.reserve(commands.size());
  std::unique_lock lock(mutex_);
  queued_.push_back(&request);
  ++requests_;
  bool expired = false;  // deadline passed while in flight: the leader's read is bounded by it
  while (!request.done) {
    if (!leader_) {
      leader_ = true;
      lead(lock, request);
      break;
    }
    if (deadline == Clock::time_point::max() || expired) {
      request.wake.wait(lock);
    } else if (request.wake.wait_until(lock, deadline) == std::cv_status::timeout && !request.done) {
      const auto at = std::find(queued_.begin(), queued_.end(), &request);
      if (at != queued_.end()) {
        // Never written: certainly not run.
        queued_.erase(at);
        if (!leader_) wake_next();  // the hand-off may have been meant for us
        throw TimeoutError(std::string(operation) + " on " + connection_.endpoint() +
                           ": deadline passed while queued for the shared connection (not sent)");
      }
      expired = true;
    }
  }
  if (request.error) std::rethrow_exception(request.error);
  return std::move(request.replies);
}

Pipeline::Clock::time_point Pipeline::earliest_in_flight_deadline() const {
  auto earliest = Clock::time_point::max();
  for (const Request* request : in_flight_) earliest = std::min(earliest, request->deadline);
  return earliest;
}

void Pipeline::fail_in_flight(const std::exception_ptr& error) {
  for (Request* request : in_flight_) {
    request->error = error;
    request->done = true;
    request->wake.notify_one();
  }
  in_flight_.clear();
}

void Pipeline::send_queued(std::unique_lock<std::mutex>& lock) {
  std::vector<Request*> batch;
  batch.reserve(queued_.size());
  const auto now = Clock::now();
  for (Request* request : queued_) {
    if (request->deadline <= now) {
      request->error = std::make_exception_ptr(
          TimeoutError(std::string(request->operation) + " on " + connection_.endpoint() +
                       ": deadline passed while queued for the shared connection (not sent)"));
      request->done = true;
      request->wake.notify_one();
    } else {
      batch.push_back(request);
    }
  }
  queued_.clear();
  if (batch.empty()) return;
  std::exception_ptr error;
  bool unsent = false;
  lock.unlock();
  try {
    connection_.ensure_connected();
    for (const Request* request : batch)
      for (const auto& command : request->commands) connection_.append(command);
    connection_.flush(batch.front()->operation);
  } catch (const ConnectError&) {
    // Not a byte of this batch left (see Connection::flush); requests in
    // flight, if any, are lost with the broken connection.
    error = std::current_exception();
    unsent = true;
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (!error) {
    in_flight_.insert(in_flight_.end(), batch.begin(), batch.end());
    ++batches_;
    return;
  }
  if (!unsent) in_flight_.insert(in_flight_.end(), batch.begin(), batch.end());
  fail_in_flight(error);
  for (Request* request : batch) {
    if (request->done) continue;
    request->error = error;
    request->done = true;
    request->wake.notify_one();
  }
}

void Pipeline::lead(std::unique_lock<std::mutex>& lock, Request& own) {
  // After its own reply the leader still reads the rest of what is in flight
  // (a hand-off mid-batch would stall the reading for a wake-up), but sends
  // nothing more: its caller waits at most one batch longer.
  while (!own.done || !in_flight_.empty()) {
    if (!own.done && !queued_.empty()) send_queued(lock);
    if (in_flight_.empty()) continue;
    Request* front = in_flight_.front();
    const auto deadline = earliest_in_flight_deadline();
    const std::string_view operation = front->operation;
    lock.unlock();
    ReplyPtr reply;
    std::exception_ptr error;
    try {
      reply = deadline == Clock::time_point::max() ? connection_.read_reply(operation)
                                                   : connection_.read_reply_until(deadline, operation);
    } catch (...) {
      // The connection is broken (Connection marks it): its later replies
      // can never reach a request, every request in flight fails.
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      fail_in_flight(error);
      continue;
    }
    front->replies.push_back(std::move(reply));
    if (front->replies.size() < front->commands.size()) continue;
    in_flight_.pop_front();
    front->done = true;
    if (front != &own) front->wake.notify_one();
  }
  leader_ = false;
  wake_next();
}

void Pipeline::wake_next() {
  // Leadership goes to the oldest waiter (it owes the next reply or write).
  if (!in_flight_.empty()) {
    in_flight_.front()->wake.notify_one();
  } else if (!queued_.empty()) {
    queued_.front()->wake.notify_one();
  }
}

}  // namespace lockon::detail
