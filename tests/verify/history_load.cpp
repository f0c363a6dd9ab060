// verify/history_load.cpp — reading a run's directory into a History.
#include <algorithm>
#include <fstream>

#include "checker.hpp"

namespace lockon::verify {

namespace {

std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

std::int64_t History::ttl_ns() const {
  const auto it = meta.find("ttl_ms");
  return (it == meta.end() ? 2000 : std::stoll(it->second)) * kMs;
}

History load_history(const std::filesystem::path& dir) {
  History h;
  for (const auto& line : lines_of(dir / "meta.txt")) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) h.meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("worker-", 0) != 0 || entry.path().extension() != ".log") continue;
    for (const auto& line : lines_of(entry.path())) {
      if (auto record = parse_cs(line)) {
        h.sections.push_back(std::move(*record));
      } else if (auto hold = parse_hold(line)) {
        h.long_holds.push_back(std::move(*hold));
      } else {
        ++h.malformed_lines;
      }
    }
  }
  for (const auto& line : lines_of(dir / "faults.log"))
    if (auto fault = parse_fault(line)) h.faults.push_back(std::move(*fault));
  std::sort(h.faults.begin(), h.faults.end(),
            [](const FaultRecord& a, const FaultRecord& b) { return a.start_ns < b.start_ns; });
  for (const auto& line : lines_of(dir / "final.txt")) {
    const auto f = split(line);
    if (f.size() == 3 && f[0] == "nottl") h.keys_without_ttl.push_back(std::string(f[1]) + ' ' + std::string(f[2]));
    if (f.size() == 3 && f[0] == "injected") h.injected[std::string(f[1])] = std::stoi(std::string(f[2]));
    if (f.size() == 2 && f[0] == "hung") h.hung_workers.emplace_back(f[1]);
    if (!f.empty() && f[0] == "scan_failed") h.keys_without_ttl.push_back("scan failed: " + line);
  }
  for (const auto& line : lines_of(dir / "resource.txt")) {
    const auto f = split(line);
    if (f.size() == 4 && f[0] == "write") {
      h.accepted_writes[std::string(f[1])].emplace_back(std::stoull(std::string(f[2])), std::string(f[3]));
    } else if (f.size() >= 2 && f[0] == "state") {
      auto& state = h.resource_state[std::string(f[1])];
      for (std::size_t i = 2; i < f.size(); ++i) {
        const auto eq = f[i].find('=');
        if (eq == std::string_view::npos) continue;
        const std::string value(f[i].substr(eq + 1));
        if (!value.empty() && value.find_first_not_of("0123456789-") == std::string::npos)
          state[std::string(f[i].substr(0, eq))] = std::stoll(value);
      }
    }
  }
  return h;
}

}  // namespace lockon::verify
