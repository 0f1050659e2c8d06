// Test support shared by weft's tests (test-only; header-only): skipping a test that
// needs root, running the `weft` binary, finding processes and namespaces left
// behind, and reading what a call refused.
//
// The parts that run the binary need WEFT_BINARY, the path CMake built it at
// (target_compile_definitions(... WEFT_BINARY="$<TARGET_FILE:weft>")); the
// privilege check and the namespace listing need weft_netem linked.
//
// Thread-safety: the functions touch only their arguments and the files they name.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "netem/netns.h"
#include "netem/process.h"
#include "units/units.h"

namespace weft::test_support {

// Skips the test unless it may create network namespaces and shape links.
#define SKIP_UNLESS_PRIVILEGED()                                                       \
  if (!::weft::netem::has_network_privileges())                                        \
  GTEST_SKIP() << "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network "    \
                  "namespaces and shape links; run `sudo ctest -L root` in the build directory"

// The whole of `file`, or "" if it cannot be read.
inline std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the UsageError `call` throws, or "no error" if it throws none.
inline std::string usage_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

// Alive and not a zombie: a killed process stays a zombie until its parent reaps
// it, and has died for every purpose a test cares about.
inline bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string line = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = line.rfind(')');
  return paren == std::string::npos || line.size() < paren + 3 || line[paren + 2] != 'Z';
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
    if (cmdline.find(token) != std::string::npos && process_alive(pid)) out.push_back(pid);
  }
  return out;
}

// The children of `parent` (from /proc/<pid>/stat's ppid field).
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_text(entry.path() / "stat");
    const auto paren = stat.rfind(')');  // comm may hold spaces, but is parenthesised
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// The RANK `pid` was started with (from its environment), or -1.
inline int rank_of(pid_t pid) {
  const std::string env = read_text(std::filesystem::path("/proc") / std::to_string(pid) / "environ");
  const auto at = env.find(std::string("\0RANK=", 6));
  return at == std::string::npos ? -1 : std::stoi(env.substr(at + 6));
}

// The namespaces `ip netns list` shows that process `pid` made (Note [Namespace
// names] in netem/netns.h).
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

// {0, 1, 2, 5} from "0-2,5"; what follows "Cpus_allowed_list:" if `text` holds
// the whole of /proc/<pid>/status.
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

#ifdef WEFT_BINARY

// A `weft` process, its stdout and stderr sent to files (the same file for both
// if they are one path), its launcher variables (MASTER_ADDR, RANK, ...) cleared
// so that it starts a job of its own; killed if the test ends before it does.
class Weft {
 public:
  using Clock = std::chrono::steady_clock;

  // `env`: variables set in the child after the launcher's are cleared.
  Weft(const std::vector<std::string>& args, const std::filesystem::path& out, const std::filesystem::path& err,
       const std::vector<std::pair<std::string, std::string>>& env = {})
      : out_(out), err_(err) {
    std::vector<std::string> argv{WEFT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> p;
      for (auto& a : argv) p.push_back(a.data());
      p.push_back(nullptr);
      const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err_fd = err == out ? out_fd : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "WEFT_LAUNCHED_WORKER"}) {
        ::unsetenv(v);
      }
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      ::execv(p[0], p.data());
      ::_exit(127);
    }
  }
  // Its output to `dir`/stdout and `dir`/stderr.
  Weft(const std::vector<std::string>& args, const std::filesystem::path& dir,
       const std::vector<std::pair<std::string, std::string>>& env = {})
      : Weft(args, dir / "stdout", dir / "stderr", env) {}
  Weft(const Weft&) = delete;
  Weft& operator=(const Weft&) = delete;
  ~Weft() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

  // The exit status (128 + signal if a signal ended it), or -1 if it did not exit
  // within `limit` (then the destructor kills it).
  int wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  std::string stderr_text() const { return read_text(err_); }
  std::string stdout_text() const { return read_text(out_); }

 private:
  std::filesystem::path out_;
  std::filesystem::path err_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// How a command line of the binary ended, run through the shell: its exit status
// (128 + signal; 124 if it outlasted `patience_s`, under timeout(1)) and its stdout
// and stderr together.
struct ShellRun {
  int status = 0;
  std::string output;
};

// Runs `WEFT_BINARY args` (shell words) to completion or `patience_s` seconds.
inline ShellRun weft_shell(const std::string& args, int patience_s = 600) {
  const std::string command =
      "timeout " + std::to_string(patience_s) + " " + std::string(WEFT_BINARY) + " " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  ShellRun ran;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) ran.output.append(buffer, n);
  const int status = ::pclose(pipe);
  ran.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ran;
}

// How a run of the binary ended.
struct WeftRun {
  pid_t pid = 0;       // the `weft` process itself
  int exit_code = 0;   // 128 + signal if a signal ended it; -1 if it outlasted `limit`
  std::string output;  // its stdout and stderr together
};

// Runs `weft args...` to completion (or `limit`), its output going to `log`.
inline WeftRun run_weft(const std::vector<std::string>& args, const std::filesystem::path& log,
                        std::chrono::seconds limit = std::chrono::seconds(600)) {
  Weft process(args, log, log);
  WeftRun run{.pid = process.pid()};
  run.exit_code = process.wait(limit);
  run.output = read_text(log);
  return run;
}

#endif  // WEFT_BINARY

}  // namespace weft::test_support
