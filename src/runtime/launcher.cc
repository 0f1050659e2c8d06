#include "runtime/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "runtime/worker_env.h"
#include "units/cores.h"

extern char** environ;

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::system_error errno_error(std::string_view what) {
  return std::system_error(errno, std::generic_category(), std::string(what));
}

// The environment of one child, built before fork(): after fork() in a process
// that may have threads, only async-signal-safe calls are allowed, so the child
// only calls execve with arrays prepared here.
class ChildEnvironment {
 public:
  ChildEnvironment(const WorkerEnv& env, int workers, const std::vector<std::string>& extra) {
    std::map<std::string, std::string> overrides;
    for (const std::string& entry : extra) {
      const std::size_t equals = entry.find('=');
      overrides[entry.substr(0, equals)] = equals == std::string::npos ? "" : entry.substr(equals + 1);
    }
    // The contract wins over `extra` (launcher.h).
    const bool server = env.rank >= workers;
    overrides["MASTER_ADDR"] = env.master_addr;
    overrides["MASTER_PORT"] = std::to_string(env.master_port);
    overrides["RANK"] = std::to_string(env.rank);
    overrides["WORLD_SIZE"] = std::to_string(env.world);
    overrides["LOCAL_RANK"] = std::to_string(env.local_rank);
    overrides["LOCAL_WORLD_SIZE"] = std::to_string(env.world);
    overrides["WEFT_ROLE"] = server ? "server" : "worker";
    overrides["WEFT_WORKERS"] = std::to_string(workers);
    overrides["WEFT_SERVERS"] = std::to_string(env.world - workers);
    if (server) overrides["WEFT_SERVER_RANK"] = std::to_string(env.rank - workers);
    overrides[kLaunchedWorkerVariable] = "1";
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      const std::string name(entry.substr(0, entry.find('=')));
      if (!overrides.contains(name)) strings_.emplace_back(entry);
    }
    for (const auto& [name, value] : overrides) strings_.push_back(name + "=" + value);
    for (std::string& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  char** envp() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

std::string describe(int status) {
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("exit status {}", WEXITSTATUS(status));
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {}

  // REQUIRES: SIGINT, SIGTERM, SIGHUP, SIGCHLD blocked in this thread (so none is
  // lost between a check and the wait).
  int run(const std::vector<pid_t>& pids, pid_t group, const sigset_t& signals) {
    group_ = group;
    for (size_t rank = 0; rank < pids.size(); ++rank) rank_of_[pids[rank]] = static_cast<int>(rank);
    while (!rank_of_.empty()) {
      reap();
      if (rank_of_.empty()) break;
      escalate();
      wait_for_signal(signals);
    }
    if (interrupted_signal_ != 0) return 128 + interrupted_signal_;
    return any_failure_ ? first_status_ : 0;
  }

 private:
  void reap() {
    int status = 0;
    pid_t pid = 0;
    while ((pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED)) > 0) {
      const auto it = rank_of_.find(pid);
      if (it == rank_of_.end()) continue;  // not ours (cannot happen: we fork nothing else)
      const int rank = it->second;
      if (WIFSTOPPED(status)) {
        on_stopped(pid, rank, WSTOPSIG(status));
        continue;
      }
      if (WIFCONTINUED(status)) {
        if (stopped_.erase(pid) != 0 && interrupted_signal_ == 0 && !any_failure_) {
          std::fprintf(stderr, "weft: %s continued\n", name(rank).c_str());
        }
        continue;
      }
      stopped_.erase(pid);
      rank_of_.erase(it);
      if (!failed(status)) continue;
      if (!any_failure_ && interrupted_signal_ == 0) {
        std::fprintf(stderr, "weft: %s failed (%s)%s; waiting up to %s for the other processes to exit\n",
                     name(rank).c_str(), describe(status).c_str(), while_stopped().c_str(),
                     format_duration(options_.failure_timeout).c_str());
        // The failed worker's own status where it has one (2: bad input), else 1.
        fail(rank, WIFEXITED(status) ? WEXITSTATUS(status) : 1);
      } else if (interrupted_signal_ == 0 && rank != first_failure_) {
        std::fprintf(stderr, "weft: %s failed (%s) after %s\n", name(rank).c_str(), describe(status).c_str(),
                     name(first_failure_).c_str());
      }
    }
  }

  // Note [Stopped workers]: a stopped rank blocks every collective, so the job
  // cannot go on while it stays stopped; it is named at once and, if still stopped
  // failure_timeout later, fails the job as an exit would.
  void on_stopped(pid_t pid, int rank, int signal) {
    if (!stopped_.emplace(pid, Stopped{signal, Clock::now() + seconds(options_.failure_timeout)}).second) return;
    if (interrupted_signal_ != 0 || any_failure_) {
      end_stopped();  // it cannot exit by itself while stopped
      return;
    }
    std::fprintf(stderr, "weft: %s was stopped (%s): the other processes cannot go on without it; it is ended if "
                         "still stopped in %s\n",
                 name(rank).c_str(), signal_name(signal).c_str(), format_duration(options_.failure_timeout).c_str());
  }

  void fail(int rank, int status) {
    first_failure_ = rank;
    first_status_ = status;
    any_failure_ = true;
    terminate_at_ = Clock::now() + seconds(options_.failure_timeout);
    end_stopped();
  }

  // ", while rank 1 is stopped (SIGSTOP)" when some are: they are why the others fail.
  std::string while_stopped() const {
    std::string names;
    for (const auto& [pid, stopped] : stopped_) {
      names += fmt::format("{}{} is stopped ({})", names.empty() ? "" : ", ", name(rank_of_.at(pid)),
                           signal_name(stopped.signal));
    }
    return names.empty() ? "" : ", while " + names;
  }

  // Stopped ranks never exit by themselves, nor handle SIGTERM.
  void end_stopped() {
    for (const auto& [pid, stopped] : stopped_) ::kill(pid, SIGKILL);
  }

  // Moves to SIGTERM, then SIGKILL, when their time has come.
  void escalate() {
    const auto now = Clock::now();
    if (!any_failure_ && interrupted_signal_ == 0) {
      for (const auto& [pid, stopped] : stopped_) {
        if (now < stopped.fail_at) continue;
        const int rank = rank_of_.at(pid);
        std::fprintf(stderr, "weft: %s still stopped (%s) after %s: ending the job\n", name(rank).c_str(),
                     signal_name(stopped.signal).c_str(), format_duration(options_.failure_timeout).c_str());
        fail(rank, 1);
        terminate_at_ = now;  // the others have waited for it long enough
        break;
      }
    }
    if (terminate_at_ && now >= *terminate_at_) {
      terminate_at_.reset();
      std::fprintf(stderr, "weft: %s still running after %s failed: terminating\n", still_running().c_str(),
                   name(first_failure_).c_str());
      signal_all(SIGTERM);
      kill_at_ = now + seconds(options_.kill_grace);
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      std::fprintf(stderr, "weft: %s ignored SIGTERM for %s: killing\n", still_running().c_str(),
                   format_duration(options_.kill_grace).c_str());
      signal_all(SIGKILL);
    }
  }

  void wait_for_signal(const sigset_t& signals) {
    std::optional<Clock::time_point> next;
    for (const auto& t : {terminate_at_, kill_at_}) {
      if (t && (!next || *t < *next)) next = t;
    }
    for (const auto& [pid, stopped] : stopped_) {
      if (!next || stopped.fail_at < *next) next = stopped.fail_at;
    }
    // Children exit with SIGCHLD, so this wakes for them; the periodic wake-up only
    // guards against a SIGCHLD coalesced with one already consumed.
    auto wait = std::chrono::nanoseconds(std::chrono::seconds(1));
    if (next) wait = std::min(wait, std::max(std::chrono::nanoseconds(0), *next - Clock::now()));
    timespec timeout{.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000),
                     .tv_nsec = static_cast<long>(wait.count() % 1'000'000'000)};
    const int sig = ::sigtimedwait(&signals, nullptr, &timeout);
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return;
    if (interrupted_signal_ != 0) {
      std::fprintf(stderr, "weft: second signal: killing the workers\n");
      signal_all(SIGKILL);
      return;
    }
    interrupted_signal_ = sig;
    std::fprintf(stderr, "weft: interrupted by %s: ending %s\n", signal_name(sig).c_str(), still_running().c_str());
    signal_all(sig);
    terminate_at_.reset();
    kill_at_ = Clock::now() + seconds(options_.kill_grace);
  }

  // The whole group, so that anything a worker started goes too; SIGCONT after, so
  // that a stopped process receives it.
  void signal_all(int sig) {
    if (group_ > 0) ::kill(-group_, sig);
    for (const auto& [pid, rank] : rank_of_) ::kill(pid, sig);
    if (sig != SIGKILL) {
      if (group_ > 0) ::kill(-group_, SIGCONT);
      for (const auto& [pid, rank] : rank_of_) ::kill(pid, SIGCONT);
    }
  }

  std::string still_running() const {
    std::string names;
    for (const auto& [pid, rank] : rank_of_) names += (names.empty() ? "" : ", ") + name(rank);
    return names;
  }

  // "rank 2" for a worker, "server 0 (rank 4)" for a parameter server.
  std::string name(int rank) const {
    if (rank >= options_.nproc) return fmt::format("server {} (rank {})", rank - options_.nproc, rank);
    return fmt::format("rank {}", rank);
  }

  static Clock::duration seconds(Seconds s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  struct Stopped {
    int signal = 0;
    Clock::time_point fail_at;  // when it fails the job if still stopped
  };

  const LaunchOptions& options_;
  pid_t group_ = 0;
  std::map<pid_t, int> rank_of_;    // children not yet reaped
  std::map<pid_t, Stopped> stopped_;  // of those, the ones stopped now
  bool any_failure_ = false;
  int first_failure_ = -1;
  int first_status_ = 1;
  int interrupted_signal_ = 0;
  std::optional<Clock::time_point> terminate_at_;
  std::optional<Clock::time_point> kill_at_;
};

// Restores the signal mask of the calling thread on scope exit.
class BlockedSignals {
 public:
  explicit BlockedSignals(const sigset_t& signals) {
    if (int error = ::pthread_sigmask(SIG_BLOCK, &signals, &previous_); error != 0) {
      throw std::system_error(error, std::generic_category(), "pthread_sigmask");
    }
  }
  ~BlockedSignals() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  const sigset_t& previous() const { return previous_; }

 private:
  sigset_t previous_;
};

// Runs in the child between fork() and execve(): async-signal-safe calls only.
[[noreturn]] void exec_child(const char* executable, char** argv, char** envp, pid_t group, pid_t parent,
                             const sigset_t& mask, const CoreSet& cores) {
  const auto fail = [](const char* message, size_t length) {
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, message, length);
    ::_exit(127);
  };
  ::setpgid(0, group);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
  ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  static constexpr char kCores[] = "weft: cannot pin the worker to its cores (sched_setaffinity)\n";
  if (!pin(cores)) fail(kCores, sizeof kCores - 1);
  ::execve(executable, argv, envp);
  static constexpr char kExec[] = "weft: cannot execute the worker program\n";
  fail(kExec, sizeof kExec - 1);
  ::_exit(127);  // not reached
}

}  // namespace

bool is_launched_worker() {
  const char* value = std::getenv(kLaunchedWorkerVariable);
  return value != nullptr && value[0] != '\0';
}

std::vector<std::string> current_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = all.find('\0', start);
    argv.push_back(all.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return argv;
}

ReservedPort::ReservedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw errno_error("socket");
  const int on = 1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const auto error = errno_error("binding a TCP socket on 127.0.0.1");
    ::close(fd_);
    throw error;
  }
  number_ = ntohs(address.sin_port);
}

ReservedPort::~ReservedPort() { ::close(fd_); }

int launch(const LaunchOptions& options) {
  if (options.nproc < 1 || options.servers < 0) {
    throw std::logic_error(fmt::format("launch: nproc = {} < 1 or servers = {} < 0", options.nproc, options.servers));
  }
  const std::string executable = options.executable.empty() ? "/proc/self/exe" : options.executable.string();
  std::vector<std::string> args = options.argv.empty() ? current_command_line() : options.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const ReservedPort port;  // Note [Reserved ports]
  std::vector<ChildEnvironment> environments;
  const int world = options.nproc + options.servers;
  environments.reserve(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    environments.emplace_back(local_worker_env(port.number(), rank, world), options.nproc, options.environment);
  }
  std::vector<CoreSet> cores;  // Note [Hosts on cores]
  for (int rank = 0; rank < world; ++rank) cores.push_back(pinning_for(rank, world, options.cores));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGCHLD);
  BlockedSignals blocked(signals);

  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  pid_t group = 0;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) exec_child(executable.c_str(), argv.data(), environments[rank].envp(), group, parent,
                             blocked.previous(), cores[static_cast<size_t>(rank)]);
    if (pid < 0) {
      const auto error = errno_error(fmt::format("starting process {} of {}", rank, world));
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      throw error;
    }
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also in the child: whichever runs first wins, both agree
    pids.push_back(pid);
  }
  return Supervisor(options).run(pids, group, signals);
}

}  // namespace weft::runtime
