// Test support for the tests that run the `weft` binary under emulated links
// (allreduce_time_test.cc, train_bandwidth_test.cc): starting it, and checking that
// it left no namespace and no process behind. WEFT_BINARY names the binary CMake
// built.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "netem/netns.h"
#include "netem/process.h"

namespace weft::test_support {

#define SKIP_UNLESS_PRIVILEGED()                                                       \
  if (!::weft::netem::has_network_privileges())                                        \
  GTEST_SKIP() << "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network "    \
                  "namespaces; run `sudo ctest -L root` in the build directory"

// How a run of the binary ended.
struct WeftRun {
  pid_t pid = 0;      // the `weft` process itself
  int exit_code = 0;  // 128 + signal if a signal ended it
  std::string output; // its stdout and stderr together
};

inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `weft args...` to completion, its output going to `log`.
inline WeftRun run_weft(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<std::string> argv{WEFT_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::FILE* out = std::fopen(log.c_str(), "w");
  if (out == nullptr) throw std::runtime_error("cannot write " + log.string());
  WeftRun run;
  run.pid = netem::spawn({.executable = WEFT_BINARY,
                          .argv = argv,
                          .environment = netem::environment_with({}),
                          .output_fd = ::fileno(out),
                          .own_process_group = false});
  std::fclose(out);
  int status = 0;
  while (::waitpid(run.pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.output = read_text(log);
  return run;
}

// The namespaces `ip netns list` shows that process `pid` made (Note [Namespace
// names] in netns.h).
inline std::vector<std::string> listed_namespaces_of(pid_t pid) {
  const netem::CommandResult listed = netem::run_command({"ip", "netns", "list"});
  std::vector<std::string> out;
  std::istringstream lines(listed.output);
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (netem::namespace_owner(name) == pid) out.push_back(name);
  }
  return out;
}

// The live processes (zombies excluded) whose command line contains `token`.
inline std::vector<pid_t> processes_mentioning(const std::string& token) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (pid == ::getpid()) continue;
    std::string cmdline = read_text(entry.path() / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(token) == std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto paren = line.rfind(')');
    if (paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'Z') continue;
    out.push_back(pid);
  }
  return out;
}

}  // namespace weft::test_support
