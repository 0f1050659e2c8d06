#include "netem/supervisor.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "netem/process.h"

namespace weft::netem {
namespace {

// Note [Termination signals]: the only process-wide state of weft_netem.
std::atomic<int> received_signal{0};
std::atomic<bool> signals_installed{false};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void on_termination_signal(int signal) {
  int none = 0;
  received_signal.compare_exchange_strong(none, signal);
}

using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = std::chrono::milliseconds(10);

Seconds since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Clock::duration duration_of(Seconds s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The exit status a shell would report for a wait status.
int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

struct Rank {
  const ProcessSpec* spec;
  ProcessExit exit;
  bool running = false;
  std::string start_error;  // why it could not start, if it could not
  int stopped_by = 0;       // the signal that stopped it, while it is stopped
  std::optional<Clock::time_point> stopped_since;
};

// Why the job is being ended before every rank finished by itself.
enum class Stop { kNone, kFailure, kSignal, kTimeout };

// If rank's process has ended, kills what is left of its process group (it cannot
// be reused while the zombie is not reaped), reaps it and returns true.
bool reap_if_ended(Rank& rank, Clock::time_point start) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(rank.exit.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != rank.exit.pid) {
    return false;
  }
  ::kill(-rank.exit.pid, SIGKILL);
  while (::waitpid(rank.exit.pid, &rank.exit.wait_status, 0) < 0 && errno == EINTR) {
  }
  rank.exit.ended_at = since(start);
  rank.running = false;
  return true;
}

// Notes a stop or a continue of rank's process (Note [Stopped ranks], supervisor.h).
void watch_stops(Rank& rank, Clock::time_point start) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(rank.exit.pid), &info, WSTOPPED | WCONTINUED | WNOHANG) != 0 ||
      info.si_pid != rank.exit.pid) {
    return;
  }
  if (info.si_code == CLD_STOPPED) {
    rank.stopped_by = info.si_status;
    rank.stopped_since = Clock::now();
    rank.exit.stopped_signal = info.si_status;
    rank.exit.stopped_at = since(start);
  } else if (info.si_code == CLD_CONTINUED) {
    rank.stopped_by = 0;
    rank.stopped_since.reset();
    // Continued by us, to receive SIGTERM: it is still the rank that was stopped.
    if (!rank.exit.stopped_by_supervisor) rank.exit.stopped_signal = 0;
  }
}

// SIGCONT after the signal, so that a stopped process receives it.
void signal_running(std::vector<Rank>& ranks, int signal) {
  for (Rank& rank : ranks) {
    if (!rank.running) continue;
    ::kill(-rank.exit.pid, signal);
    if (signal != SIGKILL) ::kill(-rank.exit.pid, SIGCONT);
    rank.exit.stopped_by_supervisor = true;
  }
}

std::string stopped_list(const std::vector<Rank>& ranks) {
  std::string list;
  for (const Rank& rank : ranks) {
    if (!rank.exit.stopped_by_supervisor) continue;
    list += list.empty() ? "" : ", ";
    list += rank.exit.label;
  }
  return list;
}

}  // namespace

TerminationSignals::TerminationSignals() {
  if (signals_installed.exchange(true)) {
    throw std::logic_error("TerminationSignals: another instance is already alive");
  }
  received_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_termination_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &previous_interrupt_);
  ::sigaction(SIGTERM, &action, &previous_terminate_);
  ::sigaction(SIGHUP, &action, &previous_hangup_);
}

TerminationSignals::~TerminationSignals() {
  ::sigaction(SIGINT, &previous_interrupt_, nullptr);
  ::sigaction(SIGTERM, &previous_terminate_, nullptr);
  ::sigaction(SIGHUP, &previous_hangup_, nullptr);
  signals_installed.store(false);
}

int TerminationSignals::received() const { return received_signal.load(); }

int termination_requested() { return received_signal.load(); }

void TerminationSignals::raise_flag(int signal) const { on_termination_signal(signal); }

RunReport supervise(const std::vector<ProcessSpec>& specs, const SuperviseOptions& options,
                    const TerminationSignals& signals) {
  if (specs.empty()) throw std::logic_error("supervise: no processes to run");
  if (options.timeout < 0 || options.grace < 0 || options.kill_after < 0) {
    throw std::logic_error(fmt::format("supervise: negative time (timeout {}, grace {}, kill_after {})",
                                       options.timeout, options.grace, options.kill_after));
  }
  const Clock::time_point start = Clock::now();
  std::vector<Rank> ranks;
  for (const ProcessSpec& spec : specs) {
    if (spec.argv.empty()) throw std::logic_error(fmt::format("supervise: {} has an empty argv", spec.label));
    ranks.push_back({.spec = &spec, .exit = {.label = spec.label}});
  }

  Stop stop = Stop::kNone;
  std::optional<std::size_t> first_failure;
  Seconds stop_at = 0;  // when `stop` was decided, since start
  std::optional<Clock::time_point> terminate_at, kill_at;
  auto decide = [&](Stop why, std::optional<std::size_t> failed, Clock::duration wait) {
    if (stop != Stop::kNone) return;
    stop = why;
    first_failure = failed;
    stop_at = since(start);
    terminate_at = Clock::now() + wait;
  };

  for (std::size_t i = 0; i < ranks.size() && signals.received() == 0; ++i) {
    Rank& rank = ranks[i];
    try {
      const std::string executable = require_executable(rank.spec->argv[0]);
      rank.exit.pid = spawn({.executable = executable,
                             .argv = rank.spec->argv,
                             .environment = environment_with(rank.spec->environment),
                             .netns = rank.spec->netns,
                             .cores = rank.spec->cores});
      rank.running = true;
    } catch (const std::exception& e) {
      rank.start_error = e.what();
      rank.exit.wait_status = W_EXITCODE(127, 0);
      rank.exit.ended_at = since(start);
      // The others would wait for it in vain: no grace.
      decide(Stop::kFailure, i, Clock::duration::zero());
      break;
    }
  }

  while (true) {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      Rank& rank = ranks[i];
      if (!rank.running) continue;
      if (!reap_if_ended(rank, start)) {
        watch_stops(rank, start);
        continue;
      }
      if (shell_status(rank.exit.wait_status) != 0 && !rank.exit.stopped_by_supervisor) {
        // A rank stopped meanwhile is why it failed: name that one.
        std::optional<std::size_t> cause;
        for (std::size_t j = 0; j < ranks.size(); ++j) {
          if (ranks[j].running && ranks[j].stopped_by != 0) cause = j;
        }
        decide(Stop::kFailure, cause.value_or(i), duration_of(options.grace));
        if (cause) {
          // It cannot exit by itself, nor handle SIGTERM; the others still get the grace.
          ::kill(-ranks[*cause].exit.pid, SIGKILL);
          ranks[*cause].exit.stopped_by_supervisor = true;
        }
      }
    }
    // Note [Stopped ranks]: stopped for the whole grace, it fails the job.
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const Rank& rank = ranks[i];
      if (rank.running && rank.stopped_since && Clock::now() - *rank.stopped_since >= duration_of(options.grace)) {
        decide(Stop::kFailure, i, Clock::duration::zero());
      }
    }
    if (signals.received() != 0) decide(Stop::kSignal, std::nullopt, Clock::duration::zero());
    if (options.timeout > 0 && since(start) >= options.timeout) {
      decide(Stop::kTimeout, std::nullopt, Clock::duration::zero());
    }
    // A signal after a failure cuts the grace period short.
    if (signals.received() != 0 && terminate_at) terminate_at = std::min(*terminate_at, Clock::now());

    bool any_running = false;
    for (const Rank& rank : ranks) any_running = any_running || rank.running;
    if (!any_running) break;

    const Clock::time_point now = Clock::now();
    if (terminate_at && now >= *terminate_at && !kill_at) {
      signal_running(ranks, SIGTERM);
      kill_at = now + duration_of(options.kill_after);
    }
    if (kill_at && now >= *kill_at) signal_running(ranks, SIGKILL);
    const timespec pause{0, std::chrono::nanoseconds(kPollInterval).count()};
    ::nanosleep(&pause, nullptr);  // a signal may cut it short, which is what we want
  }

  RunReport report;
  for (const Rank& rank : ranks) report.exits.push_back(rank.exit);
  if (stop == Stop::kNone) return report;  // all exited 0

  const std::string stopped = stopped_list(ranks);
  const std::string aftermath =
      !stopped.empty()   ? fmt::format("terminated the ranks still running: {}", stopped)
      : ranks.size() > 1 ? "the other ranks ended by themselves"
                         : "it was the only rank";
  switch (stop) {
    case Stop::kFailure: {
      const Rank& failed = ranks[*first_failure];
      report.exit_status = shell_status(failed.exit.wait_status);
      if (failed.exit.stopped_signal != 0) {
        report.exit_status = 1;
        report.message = fmt::format("{} was stopped ({}) after {:.2f} s and stopped responding; {}",
                                     failed.exit.label, signal_name(failed.exit.stopped_signal),
                                     failed.exit.stopped_at, aftermath);
      } else if (!failed.start_error.empty()) {
        report.message = fmt::format("{} could not start: {}; {}", failed.exit.label,
                                     failed.start_error, aftermath);
      } else {
        report.message = fmt::format(
            "{} {} after {:.2f} s; {}{}", failed.exit.label,
            describe_wait_status(failed.exit.wait_status), failed.exit.ended_at,
            stopped.empty() ? "" : fmt::format("after a {:.2f} s grace period, ", options.grace),
            aftermath);
      }
      break;
    }
    case Stop::kSignal: {
      const int signal = signals.received();
      report.exit_status = 128 + signal;
      report.message = fmt::format("interrupted by {} after {:.2f} s; {}", signal_name(signal),
                                   stop_at, aftermath);
      break;
    }
    case Stop::kTimeout:
      report.exit_status = 124;
      report.message = fmt::format("timed out: the job's limit of {:.2f} s was reached; {}",
                                   options.timeout, aftermath);
      break;
    case Stop::kNone:
      break;
  }
  return report;
}

}  // namespace weft::netem
