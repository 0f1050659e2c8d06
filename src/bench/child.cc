#include "bench/child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "netem/process.h"

namespace weft::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(20);
constexpr int kStopEarlyEvery = 5;  // polls between stop_early() calls: ~100 ms

Seconds since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

struct Running {
  const ChildOptions* options;
  pid_t pid = 0;
  bool running = false;
  std::optional<Clock::time_point> kill_at;
  ChildResult result;

  // SIGTERM to its process group now, SIGKILL after kill_after.
  void end() {
    if (!running || kill_at) return;
    ::kill(-pid, SIGTERM);
    kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options->kill_after));
  }
};

pid_t start(const ChildOptions& options) {
  if (options.argv.empty() || options.log.empty()) {
    throw std::logic_error(fmt::format("run_child: argv ({} entries) and log ('{}') are required",
                                       options.argv.size(), options.log.string()));
  }
  const std::string executable = netem::find_executable(options.argv[0]);
  if (executable.empty()) {
    throw UsageError(fmt::format("{} is not an executable in PATH (needed to run `{}`)", options.argv[0],
                                 netem::join_command(options.argv)));
  }
  const int log_fd = ::open(options.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::system_error(errno, std::generic_category(), "opening " + options.log.string());
  try {
    const pid_t pid = netem::spawn({.executable = executable,
                                    .argv = options.argv,
                                    .environment = netem::environment_with(options.environment),
                                    .output_fd = log_fd});
    ::close(log_fd);
    return pid;
  } catch (...) {
    ::close(log_fd);
    throw;
  }
}

// Kills and reaps every child still running (the error path of run_children).
void kill_all(std::vector<Running>& children) noexcept {
  for (Running& c : children) {
    if (!c.running) continue;
    ::kill(-c.pid, SIGKILL);
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    c.running = false;
  }
}

}  // namespace

std::vector<ChildResult> run_children(const std::vector<ChildOptions>& options,
                                      const netem::TerminationSignals& signals) {
  std::vector<Running> children;
  for (const ChildOptions& o : options) {
    children.push_back({.options = &o, .result = {.command = netem::join_command(o.argv)}});
  }
  const Clock::time_point begin = Clock::now();
  try {
    for (Running& c : children) {
      c.pid = start(*c.options);
      c.running = true;
    }
  } catch (...) {
    kill_all(children);
    throw;
  }

  const auto end_all = [&] {
    for (Running& c : children) c.end();
  };
  for (int poll = 0;; ++poll) {
    bool any_running = false;
    for (Running& c : children) {
      if (!c.running) continue;
      int status = 0;
      const pid_t done = ::waitpid(c.pid, &status, WNOHANG);
      if (done == c.pid) {
        // Whatever the child left in its process group goes with it.
        ::kill(-c.pid, SIGKILL);
        c.running = false;
        c.result.exit_status = shell_status(status);
        c.result.wall = since(begin);
        if (c.result.exit_status != 0 && !c.kill_at) end_all();
        continue;
      }
      any_running = true;
      if (signals.received() != 0 && c.result.interrupted_by == 0) {
        c.result.interrupted_by = signals.received();
        c.end();
      }
      if (c.options->timeout > 0 && since(begin) >= c.options->timeout && !c.kill_at) {
        c.result.timed_out = true;
        end_all();
      }
      if (c.options->stop_early && !c.kill_at && poll % kStopEarlyEvery == 0 && c.options->stop_early()) {
        c.result.stopped_early = true;
        end_all();
      }
      if (c.kill_at && Clock::now() >= *c.kill_at) ::kill(-c.pid, SIGKILL);
    }
    if (!any_running) break;
    const timespec pause{0, std::chrono::nanoseconds(kPollInterval).count()};
    ::nanosleep(&pause, nullptr);  // a signal cuts it short, which is what we want
  }
  std::vector<ChildResult> results;
  for (Running& c : children) results.push_back(std::move(c.result));
  return results;
}

ChildResult run_child(const ChildOptions& options, const netem::TerminationSignals& signals) {
  return run_children({options}, signals).at(0);
}

std::string log_tail(const std::filesystem::path& log, int lines) {
  std::ifstream in(log);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    // Progress lines redraw themselves with '\r'; keep what was drawn last.
    while (!line.empty() && line.back() == '\r') line.pop_back();
    if (const auto cr = line.rfind('\r'); cr != std::string::npos) line.erase(0, cr + 1);
    tail.push_back(std::move(line));
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string text;
  for (const std::string& line : tail) text += "  | " + line + "\n";
  return text;
}

}  // namespace weft::bench
