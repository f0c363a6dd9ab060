#include "node_tally.hpp"

namespace lockon::cli {

void NodeTally::record(const NodeEvent& event) {
  if (event.operation != NodeOperation::acquire) return;
  const std::lock_guard guard(mutex_);
  answers_[event.endpoint] = Answer{event.ok(), event.detail};
}

std::string NodeTally::summary(std::size_t total) const {
  const std::lock_guard guard(mutex_);
  std::size_t granted = 0;
  std::string failures;
  for (const auto& [endpoint, answer] : answers_) {
    if (answer.ok) {
      ++granted;
      continue;
    }
    failures += failures.empty() ? "failed: " : "; ";
    failures += endpoint + ": " + answer.detail;
  }
  if (answers_.size() < total) {
    failures += failures.empty() ? "failed: " : "; ";
    failures += std::to_string(total - answers_.size()) + " node(s) did not answer";
  }
  std::string text = std::to_string(granted) + " of " + std::to_string(total) + " nodes";
  if (!failures.empty()) text += " (" + failures + ")";
  return text;
}

}  // namespace lockon::cli
