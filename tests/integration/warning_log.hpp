// integration/warning_log.hpp — records what lockon reports through
// set_warning_handler while it lives (the eviction tests).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockon/diagnostics.hpp"

namespace lockon::test {

class WarningLog {
 public:
  WarningLog() {
    set_warning_handler([this](std::string_view topic, std::string_view message) {
      std::lock_guard guard(mutex_);
      seen_.emplace_back(std::string(topic), std::string(message));
    });
  }
  ~WarningLog() { set_warning_handler({}); }
  WarningLog(const WarningLog&) = delete;
  WarningLog& operator=(const WarningLog&) = delete;

  /// The (topic, message) pairs reported under `topic`, in order.
  std::vector<std::pair<std::string, std::string>> about(const std::string& topic) {
    std::lock_guard guard(mutex_);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& w : seen_)
      if (w.first == topic) out.push_back(w);
    return out;
  }
  std::size_t count(const std::string& topic) { return about(topic).size(); }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> seen_;
};

}  // namespace lockon::test
