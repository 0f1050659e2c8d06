#include "runtime/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
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
#include <utility>

#include <fmt/format.h>

#include "runtime/launch/rank_output.h"
#include "runtime/launch/worker_env.h"
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
    if (::isatty(STDERR_FILENO) == 1) overrides[kTerminalVariable] = "1";
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

// "rank 2" for a worker, "server 0 (rank 4)" for a parameter server.
std::string rank_name(int rank, int workers) {
  if (rank >= workers) return fmt::format("server {} (rank {})", rank - workers, rank);
  return fmt::format("rank {}", rank);
}

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// The read end of one rank's stderr pipe (Note [Ranks' stderr]), -1 once it ended.
struct RankPipe {
  Fd fd;
  int source = -1;  // in the RankOutput
};

class Supervisor {
 public:
  // `pipes[rank]`: the read end of the rank's stderr, or none (Note [Ranks' stderr]).
  // `signals`: a signalfd of SIGINT, SIGTERM, SIGHUP and SIGCHLD.
  Supervisor(const LaunchOptions& options, RankOutput& output, std::vector<RankPipe> pipes, Fd signals)
      : options_(options), output_(output), pipes_(std::move(pipes)), signals_(std::move(signals)) {}

  // REQUIRES: SIGINT, SIGTERM, SIGHUP, SIGCHLD blocked in this thread (so none is
  // lost between a check and the wait, and they reach the signalfd).
  int run(const std::vector<pid_t>& pids, pid_t group) {
    group_ = group;
    for (size_t rank = 0; rank < pids.size(); ++rank) rank_of_[pids[rank]] = static_cast<int>(rank);
    while (!rank_of_.empty()) {
      reap();
      if (rank_of_.empty()) break;
      escalate();
      wait_for_event();
    }
    // What the ranks' own children still hold open is not waited for.
    for (size_t rank = 0; rank < pipes_.size(); ++rank) drain(static_cast<int>(rank), /*ended=*/true);
    if (interrupted_signal_ != 0) return 128 + interrupted_signal_;
    return any_failure_ ? first_status_ : 0;
  }

 private:
  void say(const std::string& line) { output_.say(line); }

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
          say(fmt::format("weft: {} continued", name(rank)));
        }
        continue;
      }
      stopped_.erase(pid);
      rank_of_.erase(it);
      drain(rank, /*ended=*/true);  // its last words before the verdict on it
      if (!failed(status)) continue;
      if (!any_failure_ && interrupted_signal_ == 0) {
        say(fmt::format("weft: {} failed ({}){}; waiting up to {} for the other processes to exit", name(rank),
                        describe(status), while_stopped(), format_duration(options_.failure_timeout)));
        // The failed worker's own status where it has one (2: bad input), else 1.
        fail(rank, WIFEXITED(status) ? WEXITSTATUS(status) : 1);
      } else if (interrupted_signal_ == 0 && rank != first_failure_) {
        say(fmt::format("weft: {} failed ({}) after {}", name(rank), describe(status), name(first_failure_)));
        // A rank that refused bad input (2) is why the others failed as it left
        // (a broken pipe), even where one of them was reaped first: the job's
        // status is its 2.
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2) first_status_ = 2;
      }
    }
  }

  // Forwards what rank `rank` wrote that is there to read now; `ended`: the rank
  // has exited, so its pipe is closed after (what its own children, still
  // holding it, write later is not waited for).
  void drain(int rank, bool ended) {
    if (static_cast<size_t>(rank) >= pipes_.size()) return;
    RankPipe& pipe = pipes_[static_cast<size_t>(rank)];
    if (pipe.fd.get() < 0) return;
    const auto close_pipe = [&] {
      output_.end(pipe.source);
      pipe.fd.reset();
    };
    char buffer[64 * 1024];
    // Bounded per call, so that a rank that writes without pause cannot hold up
    // the signals: the rest is read at the next wake-up.
    for (int reads = 0; reads < (ended ? 64 : 16); ++reads) {
      const ssize_t n = ::read(pipe.fd.get(), buffer, sizeof buffer);
      if (n > 0) {
        output_.feed(pipe.source, std::string_view(buffer, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      close_pipe();  // its end, or an error
      return;
    }
    if (ended) close_pipe();
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
    say(fmt::format("weft: {} was stopped ({}): the other processes cannot go on without it; it is ended if "
                    "still stopped in {}",
                    name(rank), signal_name(signal), format_duration(options_.failure_timeout)));
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
        say(fmt::format("weft: {} still stopped ({}) after {}: ending the job", name(rank),
                        signal_name(stopped.signal), format_duration(options_.failure_timeout)));
        fail(rank, 1);
        terminate_at_ = now;  // the others have waited for it long enough
        break;
      }
    }
    if (terminate_at_ && now >= *terminate_at_) {
      terminate_at_.reset();
      say(fmt::format("weft: {} still running after {} failed: terminating", still_running(),
                      name(first_failure_)));
      end_gracefully(SIGTERM);
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_.reset();
      say(fmt::format("weft: {} ignored {} for {}: killing", still_running(), signal_name(sent_signal_),
                      format_duration(options_.kill_grace)));
      signal_all(SIGKILL);
    }
  }

  // Sleeps until a signal arrives, a rank writes to its stderr, or the next
  // deadline (escalate()'s, a stopped rank's).
  void wait_for_event() {
    std::optional<Clock::time_point> next;
    for (const auto& t : {terminate_at_, kill_at_}) {
      if (t && (!next || *t < *next)) next = t;
    }
    for (const auto& [pid, stopped] : stopped_) {
      if (!next || stopped.fail_at < *next) next = stopped.fail_at;
    }
    // Children exit with SIGCHLD, so this wakes for them; the periodic wake-up only
    // guards against a SIGCHLD coalesced with one already consumed.
    auto wait = std::chrono::milliseconds(1000);
    if (next) {
      wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(
                                std::max(Clock::duration(0), *next - Clock::now())));
    }
    std::vector<pollfd> fds{{.fd = signals_.get(), .events = POLLIN, .revents = 0}};
    std::vector<int> ranks{-1};
    for (size_t rank = 0; rank < pipes_.size(); ++rank) {
      if (pipes_[rank].fd.get() < 0) continue;
      fds.push_back({.fd = pipes_[rank].fd.get(), .events = POLLIN, .revents = 0});
      ranks.push_back(static_cast<int>(rank));
    }
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait.count())) <= 0) return;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) drain(ranks[i], /*ended=*/false);
    }
    signalfd_siginfo info{};
    while (::read(signals_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      on_signal(static_cast<int>(info.ssi_signo));
    }
  }

  void on_signal(int sig) {
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) return;  // SIGCHLD: reap() looks
    if (interrupted_signal_ != 0) {
      say("weft: second signal: killing the workers");
      signal_all(SIGKILL);
      return;
    }
    interrupted_signal_ = sig;
    say(fmt::format("weft: interrupted by {}: ending {}", signal_name(sig), still_running()));
    terminate_at_.reset();
    end_gracefully(sig);
  }

  // `sig` to every child, and SIGKILL after the grace to those it did not end.
  void end_gracefully(int sig) {
    signal_all(sig);
    sent_signal_ = sig;
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

  std::string name(int rank) const { return rank_name(rank, options_.nproc); }

  static Clock::duration seconds(Seconds s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  struct Stopped {
    int signal = 0;
    Clock::time_point fail_at;  // when it fails the job if still stopped
  };

  const LaunchOptions& options_;
  RankOutput& output_;
  std::vector<RankPipe> pipes_;  // by rank; empty for a job of one process
  Fd signals_;
  pid_t group_ = 0;
  std::map<pid_t, int> rank_of_;    // children not yet reaped
  std::map<pid_t, Stopped> stopped_;  // of those, the ones stopped now
  bool any_failure_ = false;
  int first_failure_ = -1;
  int first_status_ = 1;
  int interrupted_signal_ = 0;
  int sent_signal_ = 0;  // the last signal end_gracefully() sent: what kill_at_ waits on
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
// `stderr_fd`: the write end of the rank's stderr pipe, or -1 to keep ours.
[[noreturn]] void exec_child(const char* executable, char** argv, char** envp, pid_t group, pid_t parent,
                             const sigset_t& mask, const CoreSet& cores, int stderr_fd) {
  const auto fail = [](const char* message, size_t length) {
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, message, length);
    ::_exit(127);
  };
  ::setpgid(0, group);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
  if (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0) ::_exit(127);
  // Note [Signals a worker ends on]: the signals the launcher forwards end a worker,
  // whatever disposition the launcher inherited (a script's `weft train &` runs
  // with SIGINT ignored, nohup with SIGHUP ignored, and exec keeps "ignored").
  struct sigaction by_default {};
  by_default.sa_handler = SIG_DFL;
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &by_default, nullptr);
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

  // Before any child exists, so that the job can always be supervised.
  Fd signal_fd(::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC));
  if (signal_fd.get() < 0) throw errno_error("signalfd");

  // Note [Ranks' stderr]: a job of two or more processes has its ranks' stderr
  // piped here and forwarded line by line.
  RankOutput output(STDERR_FILENO, ::isatty(STDERR_FILENO) == 1);
  std::vector<RankPipe> pipes;
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  pid_t group = 0;
  for (int rank = 0; rank < world; ++rank) {
    Fd write_end;
    if (world > 1) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) != 0) {
        const auto error = errno_error(fmt::format("creating the stderr pipe of process {} of {}", rank, world));
        for (pid_t p : pids) ::kill(p, SIGKILL);
        for (pid_t p : pids) ::waitpid(p, nullptr, 0);
        throw error;
      }
      ::fcntl(ends[0], F_SETFL, O_NONBLOCK);
      pipes.push_back({.fd = Fd(ends[0]), .source = output.add(rank_name(rank, options.nproc))});
      write_end = Fd(ends[1]);
    }
    const pid_t pid = ::fork();
    if (pid == 0) exec_child(executable.c_str(), argv.data(), environments[rank].envp(), group, parent,
                             blocked.previous(), cores[static_cast<size_t>(rank)], write_end.get());
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
  return Supervisor(options, output, std::move(pipes), std::move(signal_fd)).run(pids, group);
}

}  // namespace weft::runtime
