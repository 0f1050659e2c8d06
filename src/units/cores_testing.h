// Test support: the cores a process runs on, as the kernel lists them in
// /proc/<pid>/status ("Cpus_allowed_list:\t0-2,5").
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace weft::test_support {

// {0, 1, 2, 5} from "0-2,5"; what follows "Cpus_allowed_list:" if `text` holds
// the whole status file.
inline std::vector<int> parse_core_list(std::string text) {
  const std::string key = "Cpus_allowed_list:";
  if (const auto at = text.find(key); at != std::string::npos) {
    text = text.substr(at + key.size());
    text = text.substr(0, text.find('\n'));
  }
  std::vector<int> cores;
  std::stringstream in(text);
  for (std::string range; std::getline(in, range, ',');) {
    const auto dash = range.find('-');
    const int first = std::stoi(range.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(range.substr(dash + 1));
    for (int core = first; core <= last; ++core) cores.push_back(core);
  }
  return cores;
}

}  // namespace weft::test_support
