// Test support: whether a process is still running. Tests of the supervisors
// (netem, bench) use it to check that nothing is left behind.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <fstream>
#include <string>

namespace weft::test_support {

// Alive and not a zombie: a killed process stays a zombie until its parent reaps
// it, and has died for every purpose a test cares about.
inline bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || line.size() < paren + 3 || line[paren + 2] != 'Z';
}

}  // namespace weft::test_support
