#include "netem/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "units/units.h"

extern char** environ;

namespace weft::netem {
namespace {

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The step at which a child failed, reported to the parent through a pipe that
// exec closes (O_CLOEXEC): reading zero bytes means exec succeeded.
enum class ChildStep : int { kProcessGroup, kParentDeath, kNamespace, kCores, kOutput, kExec };

struct ChildFailure {
  ChildStep step;
  int error;
};

const char* describe(ChildStep step) {
  switch (step) {
    case ChildStep::kProcessGroup: return "setpgid";
    case ChildStep::kParentDeath: return "prctl(PR_SET_PDEATHSIG)";
    case ChildStep::kNamespace: return "setns";
    case ChildStep::kCores: return "sched_setaffinity";
    case ChildStep::kOutput: return "dup2";
    case ChildStep::kExec: return "execve";
  }
  return "?";
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  result.reserve(strings.size() + 1);
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

// Runs in the child between fork and exec: system calls only.
[[noreturn]] void become_child(const SpawnRequest& request, pid_t parent, int netns_fd,
                               int report_fd, const char* path, char* const* argv,
                               char* const* envp) {
  auto fail = [report_fd](ChildStep step) {
    ChildFailure failure{step, errno};
    [[maybe_unused]] ssize_t n = ::write(report_fd, &failure, sizeof failure);
    ::_exit(127);
  };
  if (request.own_process_group && ::setpgid(0, 0) != 0) fail(ChildStep::kProcessGroup);
  if (request.die_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(ChildStep::kParentDeath);
    // The parent may have died before prctl took effect.
    if (::getppid() != parent) ::_exit(127);
  }
  if (netns_fd >= 0 && ::setns(netns_fd, CLONE_NEWNET) != 0) fail(ChildStep::kNamespace);
  if (!pin(request.cores)) fail(ChildStep::kCores);
  if (request.output_fd >= 0) {
    if (::dup2(request.output_fd, STDOUT_FILENO) < 0 ||
        ::dup2(request.output_fd, STDERR_FILENO) < 0) {
      fail(ChildStep::kOutput);
    }
  }
  // Handlers the parent installed are reset by exec; a blocked mask is not.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  fail(ChildStep::kExec);
  ::_exit(127);  // not reached
}

}  // namespace

pid_t spawn(const SpawnRequest& request) {
  if (request.argv.empty()) throw std::logic_error("spawn: empty argv");
  std::vector<std::string> argv_storage = request.argv;
  std::vector<std::string> env_storage = request.environment;
  std::vector<char*> argv = pointers(argv_storage);
  std::vector<char*> envp = pointers(env_storage);

  Fd netns_fd;
  if (!request.netns.empty()) {
    std::string path = "/run/netns/" + request.netns;
    netns_fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (netns_fd.get() < 0) {
      throw std::system_error(errno, std::generic_category(),
                              fmt::format("cannot open network namespace {}", path));
    }
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  Fd report_read(pipe_fds[0]);
  Fd report_write(pipe_fds[1]);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
  if (pid == 0) {
    become_child(request, parent, netns_fd.get(), report_write.get(),
                 request.executable.c_str(), argv.data(), envp.data());
  }
  // Also set the group from the parent, so it is in place whichever runs first and
  // a signal sent to the group right after spawn() returns cannot miss it.
  if (request.own_process_group) ::setpgid(pid, pid);
  report_write.reset();

  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(report_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return pid;  // exec closed the pipe: the program is running

  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof failure)) {
    throw std::runtime_error(
        fmt::format("starting {}: the child ended before exec ({})", request.executable,
                    describe_wait_status(status)));
  }
  throw std::system_error(
      failure.error, std::generic_category(),
      fmt::format("starting {}{}: {} failed", request.executable,
                  request.netns.empty() ? "" : " in network namespace " + request.netns,
                  describe(failure.step)));
}

namespace {
bool executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}
}  // namespace

std::string find_executable(std::string_view name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string_view::npos) return executable_file(std::string(name)) ? std::string(name) : "";
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    std::string candidate = std::string(dir.empty() ? "." : dir) + "/" + std::string(name);
    if (executable_file(candidate)) return candidate;
    if (colon == std::string_view::npos) return {};
    dirs.remove_prefix(colon + 1);
  }
}

std::string require_executable(std::string_view name, std::string_view where) {
  std::string found = find_executable(name);
  if (!found.empty()) return found;
  const std::string path(name);
  struct stat st {};
  std::string why;
  if (name.find('/') == std::string_view::npos) why = "not an executable file in PATH";
  else if (::stat(path.c_str(), &st) != 0) why = "no such file";
  else if (S_ISDIR(st.st_mode)) why = "a directory, not a program";
  else why = "not an executable file (chmod +x it, or name its interpreter first)";
  throw UsageError(fmt::format("command `{}`{}: {}; give the path of a program (for example /usr/bin/python3) or "
                               "install it",
                               name, where.empty() ? "" : fmt::format(" ({})", where), why));
}

std::vector<std::string> environment_with(const std::vector<std::string>& overrides) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> result;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry = *e;
    bool overridden = false;
    for (const std::string& o : overrides) {
      if (name_of(o) == name_of(entry)) overridden = true;
    }
    if (!overridden) result.emplace_back(entry);
  }
  result.insert(result.end(), overrides.begin(), overrides.end());
  return result;
}

bool CommandResult::succeeded() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  if (argv.empty()) throw std::logic_error("run_command: empty argv");
  std::string executable = find_executable(argv[0]);
  if (executable.empty()) {
    throw std::system_error(ENOENT, std::generic_category(),
                            fmt::format("{} is not in PATH", argv[0]));
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  Fd out_read(pipe_fds[0]);
  Fd out_write(pipe_fds[1]);
  const pid_t pid = spawn({.executable = executable,
                           .argv = argv,
                           .environment = environment_with({}),
                           .output_fd = out_write.get()});
  out_write.reset();

  CommandResult result;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(out_read.get(), buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  while (::waitpid(pid, &result.wait_status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

void run_checked(const std::vector<std::string>& argv) {
  CommandResult result = run_command(argv);
  if (result.succeeded()) return;
  std::string output = result.output;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  throw std::runtime_error(fmt::format("`{}` {}{}{}", join_command(argv),
                                       describe_wait_status(result.wait_status),
                                       output.empty() ? "" : ": ", output));
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* name = ::sigdescr_np(sig);
    return fmt::format("was killed by signal {} ({})", sig, name != nullptr ? name : "?");
  }
  return fmt::format("ended with wait status {:#x}", wait_status);
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$") == std::string::npos;
    line += plain ? arg : fmt::format("'{}'", arg);
  }
  return line;
}

}  // namespace weft::netem
