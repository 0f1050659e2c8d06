// Every flag of every command, given bad values (docs/limits.md): wrong types,
// signs, infinities, NaN, huge numbers, empty values, and special files where a
// file is named (a directory, a FIFO made here, /dev/zero). Each case must exit 2
// naming the flag, without a crash, within 5 s, creating no file in its working
// folder or beside the files it was given. The flags are read from the command
// line's own CLI11 apps (cli::add_commands), so a new flag is covered as it is
// added; a text flag must be listed in kTextFlags with what it names, and the
// test fails until it is.
//
// Note [Flag cases in forked children]
// ------------------------------------
// A case runs weft's own main (cli::run_command_line) in a child forked from this
// test rather than the weft binary: a new process spends about a second of CPU
// loading LibTorch, so ~1,000 cases would take over ten minutes on 2 cores, and a
// fork of a process that has loaded it takes milliseconds. The child is what the
// binary's process would be: its own process group, working folder (empty),
// stdin /dev/null, stdout and stderr to files, killed beyond 5 s. A case wrongly
// accepted may start a job, which re-executes /proc/self/exe — this test — as a
// worker with the test's own argv: main() below sees WEFT_LAUNCHED_WORKER and runs
// the case's argv (passed in kCaseArgvVariable) as the binary would.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The case's argv, '\x1f'-separated, for a job it starts (see the note).
constexpr const char* kCaseArgvVariable = "WEFT_TEST_CASE_ARGV";
constexpr auto kPatience = std::chrono::seconds(5);  // per case; beyond it, a hang
constexpr int kConcurrent = 2;                        // cases at once

// What a flag's value is, as the command line documents it.
enum class Kind {
  kInteger,    // INT with a range
  kUnsigned,   // UINT (seeds)
  kNumber,     // FLOAT with a range
  kDuration,   // TEXT: a duration
  kSize,       // TEXT: a size
  kRate,       // TEXT: a rate
  kChoice,     // TEXT: one of a few words (a model, a strategy, an encoding...)
  kInput,      // TEXT: a file weft reads
  kProgram,    // TEXT: a program or script weft runs
  kOutput,     // TEXT: a file weft writes
  kOutputDir,  // TEXT: a folder weft writes into
  kOutputStem, // TEXT: FILE of the files FILE.rank<r> weft writes
};

// What each text flag without a validator names; every such flag must be here,
// and everything here must be a flag (TextFlagsAreAllClassified).
const std::map<std::string, Kind> kTextFlags = {
    {"plan --model", Kind::kChoice},          {"plan --device", Kind::kChoice},
    {"plan --arch", Kind::kChoice},           {"plan --compression", Kind::kChoice},
    {"plan --strategy", Kind::kChoice},       {"plan --profile", Kind::kInput},
    {"plan --network", Kind::kInput},         {"plan --host", Kind::kInput},
    {"plan --trace", Kind::kOutput},          {"simulate --model", Kind::kChoice},
    {"simulate --device", Kind::kChoice},     {"simulate --arch", Kind::kChoice},
    {"simulate --compression", Kind::kChoice}, {"simulate --strategy", Kind::kChoice},
    {"simulate --profile", Kind::kInput},     {"simulate --network", Kind::kInput},
    {"simulate --host", Kind::kInput},        {"simulate --schedule", Kind::kInput},
    {"simulate --trace", Kind::kOutput},      {"simulate --schedule-out", Kind::kOutput},
    {"train --model", Kind::kChoice},         {"train --strategy", Kind::kChoice},
    {"train --cores", Kind::kChoice},         {"train --optimizer", Kind::kChoice},
    {"train --outer-optimizer", Kind::kChoice}, {"train --compression", Kind::kChoice},
    {"train --profile", Kind::kInput},        {"train --network", Kind::kInput},
    {"train --host", Kind::kInput},           {"train --metrics", Kind::kOutput},
    {"train --trace", Kind::kOutput},         {"train --save-params", Kind::kOutputStem},
    {"train --checkpoint", Kind::kOutputDir}, {"profile --model", Kind::kChoice},
    {"profile --cores", Kind::kChoice},       {"profile --out", Kind::kOutput},
    {"profile --host", Kind::kOutput},        {"bench --model", Kind::kChoice},
    {"bench --strategies", Kind::kChoice},    {"bench --mode", Kind::kChoice},
    {"bench --outer-optimizer", Kind::kChoice}, {"bench --optimizer", Kind::kChoice},
    {"bench --compression", Kind::kChoice},   {"bench --peers", Kind::kChoice},
    {"bench --cores", Kind::kChoice},         {"bench --trace-strategy", Kind::kChoice},
    {"bench --report", Kind::kInput},         {"bench --python", Kind::kProgram},
    {"bench --ddp-peer", Kind::kProgram},     {"bench --out", Kind::kOutputDir},
    {"netem --cores", Kind::kChoice},         {"run --cores", Kind::kChoice},
    {"netem --sites", Kind::kChoice},         {"netem --topology", Kind::kInput},
    {"run --sites", Kind::kChoice},           {"run --topology", Kind::kInput},
    {"train --sites", Kind::kChoice},         {"train --topology", Kind::kInput},
    {"train --allow", Kind::kChoice},
    {"plan --sites", Kind::kChoice},          {"plan --topology", Kind::kInput},
    {"simulate --sites", Kind::kChoice},      {"simulate --topology", Kind::kInput},
    {"bench --sites", Kind::kChoice},         {"bench --topology", Kind::kInput},
    {"bench --site-averaging", Kind::kChoice},
};

// Cases weft still gets wrong ("command --flag what"), each with where the fix
// goes: not run (several would take the 5 s each), listed in the test's output,
// and each must still name a case the generator makes.
const std::map<std::string, std::string> kKnownGaps = {
    {"train --trace a FIFO nobody reads",
     "refused only by the worker after training (seconds): check_output lets a FIFO no program reads pass"},
};

struct Flag {
  std::string command;  // "plan"
  std::string name;     // "--lr"
  std::string type;     // CLI11's type name: "FLOAT:a finite number in (0, 1000]"
  Kind kind = Kind::kChoice;
  bool classified = true;  // false: a text flag missing from kTextFlags
};

// Every option that takes a value, of every command (positionals and --help left out).
std::vector<Flag> all_flags() {
  CLI::App app;
  int status = 0;
  add_commands(app, status);
  std::vector<Flag> flags;
  for (const CLI::App* command : app.get_subcommands({})) {
    for (const CLI::Option* option : command->get_options()) {
      // A flag that takes no value has no type name.
      if (!option->nonpositional() || option->get_type_name().empty() || option->get_lnames().empty()) continue;
      Flag f{.command = command->get_name(), .name = "--" + option->get_lnames().front(),
             .type = option->get_type_name()};
      const std::string& t = f.type;
      if (t.starts_with("INT")) {
        f.kind = Kind::kInteger;
      } else if (t.starts_with("UINT")) {
        f.kind = Kind::kUnsigned;
      } else if (t.starts_with("FLOAT")) {
        f.kind = Kind::kNumber;
      } else if (t.starts_with("TEXT:a duration")) {
        f.kind = Kind::kDuration;
      } else if (t.starts_with("TEXT:a size")) {
        f.kind = Kind::kSize;
      } else if (t.starts_with("TEXT:a rate")) {
        f.kind = Kind::kRate;
      } else if (const auto it = kTextFlags.find(f.command + " " + f.name); it != kTextFlags.end()) {
        f.kind = it->second;
      } else {
        f.classified = false;
      }
      flags.push_back(f);
    }
  }
  return flags;
}

// A valid, cheap invocation of each command: flag → value, and what follows `--`.
struct Base {
  std::vector<std::pair<std::string, std::string>> flags;
  std::vector<std::string> tail;
};

Base base_of(const std::string& command, const fs::path& scratch) {
  if (command == "plan") return {{{"--model", "resnet18"}, {"--workers", "2"}, {"--no-tune", ""}}, {}};
  if (command == "simulate") return {{{"--model", "resnet18"}, {"--workers", "2"}}, {}};
  if (command == "train") {
    return {{{"--model", "mlp"}, {"--synthetic", ""}, {"--steps", "1"}, {"--no-progress", ""}}, {}};
  }
  if (command == "profile") return {{{"--model", "mlp"}, {"--iterations", "1"}, {"--warmup", "0"}}, {}};
  if (command == "bench") {
    return {{{"--loopback", ""}, {"--model", "mlp"}, {"--workers", "2"}, {"--steps", "10"}, {"--strategies", "wfbp"},
             {"--no-ddp", ""}, {"--out", (scratch / "bench-out").string()}},
            {}};
  }
  if (command == "netem") return {{{"--workers", "1"}, {"--bandwidth", "1Gbit"}}, {"true"}};
  if (command == "run") return {{{"--nproc", "1"}}, {"true"}};
  return {};
}

// A FIFO a case is given, made in the case's own folder as it starts.
enum class Fifo {
  kNone,
  kFed,     // read by weft: the test writes a line of garbage once weft opens it
  kUnread,  // written by weft: nobody reads it
};

// One case: `flag` given `value` (a FIFO's path, for one).
struct Case {
  Flag flag;
  std::string value;
  std::string what;  // how the value is bad, for messages
  Fifo fifo = Fifo::kNone;
};

// How kKnownGaps names a case.
std::string gap_of(const Case& c) { return fmt::format("{} {} {}", c.flag.command, c.flag.name, c.what); }

// The bad values of `flag`, with files from `fixtures`.
std::vector<Case> cases_of(const Flag& flag, const fs::path& fixtures) {
  std::vector<Case> out;
  const auto add = [&](std::string value, std::string what, Fifo fifo = Fifo::kNone) {
    out.push_back({flag, std::move(value), std::move(what), fifo});
  };
  // Zero is bad where the range starts above it: "(0," or "[1", not "[0,".
  const bool zero_allowed = flag.kind == Kind::kUnsigned || flag.type.find("in [0,") != std::string::npos;
  const auto numbers = [&](const std::string& unit) {
    add("abc" + unit, "not a number");
    add("", "empty");
    add("inf" + unit, "infinite");
    add("-inf" + unit, "minus infinity");
    add("nan" + unit, "not a number (NaN)");
    add("1e308" + unit, "beyond any range");
    add("-1" + unit, "negative");
    add("99999999999999999999999" + unit, "beyond 64 bits");
    if (!zero_allowed) add("-0" + unit, "zero, which the range excludes");
  };
  switch (flag.kind) {
    case Kind::kInteger:
    case Kind::kUnsigned:
      numbers("");
      add("1.5", "a fraction");
      break;
    case Kind::kNumber: numbers(""); break;
    case Kind::kDuration:
      numbers("ms");
      add("5parsecs", "an unknown unit");
      break;
    case Kind::kSize:
      numbers("KiB");
      add("4XB", "an unknown unit");
      break;
    case Kind::kRate:
      numbers("Gbit");
      add("1e-300Gbit", "below any range");
      add("1Gbat", "an unknown unit");
      break;
    case Kind::kChoice:
      add("", "empty");
      add("no-such-choice", "not one of the choices");
      add("-1", "a number");
      break;
    case Kind::kInput: {
      add("", "empty");
      add((fixtures / "folder").string(), "a directory");
      add((fixtures / "missing.json").string(), "a missing file");
      add((fixtures / "empty.json").string(), "an empty file");
      add((fixtures / "garbage.json").string(), "not JSON");
      add("/dev/zero", "an endless device");
      add("", "a FIFO that delivers garbage", Fifo::kFed);
      break;
    }
    case Kind::kProgram:
      add("", "empty");
      add((fixtures / "folder").string(), "a directory");
      add((fixtures / "missing.py").string(), "a missing file");
      add("/dev/zero", "a device");
      break;
    case Kind::kOutput:
      add("", "empty");
      add((fixtures / "folder").string(), "a directory");
      add((fixtures / "no" / "such" / "out.json").string(), "in a missing folder");
      add("", "a FIFO nobody reads", Fifo::kUnread);
      break;
    case Kind::kOutputStem:
      add("", "empty");
      add((fixtures / "no" / "such" / "stem").string(), "in a missing folder");
      add((fixtures / "taken").string(), "FILE.rank0 a directory");
      break;
    case Kind::kOutputDir:
      add("", "empty");
      add((fixtures / "garbage.json").string(), "a regular file");
      add((fixtures / "no" / "such" / "dir").string(), "in a missing folder");
      break;
  }
  return out;
}

// The files under `dir`, recursively, as relative paths.
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error); !error && it != fs::recursive_directory_iterator();
       it.increment(error)) {
    names.insert(fs::relative(it->path(), dir).string());
  }
  return names;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A case being run.
struct Running {
  Case c;
  std::vector<std::string> argv;
  fs::path dir;
  pid_t pid = -1;
  Clock::time_point started;
  bool fed = false;
};

// How a case ended.
struct Outcome {
  int status = -1;  // exit status; -1: killed by a signal or past its time
  int signal = 0;
  bool hung = false;
  double seconds = 0;
};

class BadFlags : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / fmt::format("weft_bad_flags_{}_{}", ::getpid(), GetParam());
    fs::remove_all(root_);
    fixtures_ = root_ / "fixtures";
    fs::create_directories(fixtures_ / "folder");
    fs::create_directories(fixtures_ / "taken.rank0");
    std::ofstream(fixtures_ / "empty.json").flush();
    std::ofstream(fixtures_ / "garbage.json") << "not json {\n";
    // Orphans of a case (a job's processes in groups of their own) come to us.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  void TearDown() override {
    end_orphans();
    fs::remove_all(root_);
  }

  // Starts `c` in a forked child (Note [Flag cases in forked children]).
  Running start(const Case& c, int index) {
    Running r{.c = c, .dir = root_ / fmt::format("case{}", index)};
    fs::create_directories(r.dir / "cwd");
    if (c.fifo != Fifo::kNone) {
      r.c.value = (r.dir / "file.fifo").string();
      ::mkfifo(r.c.value.c_str(), 0600);
    }
    const Base base = base_of(c.flag.command, r.dir);
    r.argv = {"weft", c.flag.command};
    for (const auto& [name, value] : base.flags) {
      if (name == c.flag.name) continue;
      r.argv.push_back(name);
      if (!value.empty()) r.argv.push_back(value);
    }
    r.argv.push_back(c.flag.name + "=" + r.c.value);
    if (!base.tail.empty()) r.argv.push_back("--");
    r.argv.insert(r.argv.end(), base.tail.begin(), base.tail.end());
    std::string joined;
    for (const std::string& a : r.argv) joined += (joined.empty() ? "" : "\x1f") + a;
    std::cout.flush();
    std::fflush(nullptr);
    r.started = Clock::now();
    r.pid = ::fork();
    if (r.pid == 0) run_case(r, joined);
    return r;
  }

  // In the child: becomes the `weft` process of the case, and never returns.
  [[noreturn]] static void run_case(const Running& r, const std::string& joined) {
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (::chdir((r.dir / "cwd").c_str()) != 0) ::_exit(126);
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open((r.dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((r.dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "WEFT_LAUNCHED_WORKER"}) {
      ::unsetenv(v);
    }
    ::setenv(kCaseArgvVariable, joined.c_str(), 1);
    std::vector<std::string> args = r.argv;
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int status = run_command_line(static_cast<int>(args.size()), argv.data());
    // Without exit()'s static destructors: LibTorch's deregister thousands of
    // kernels, ~50 ms a case. What weft wrote is flushed first.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    ::_exit(status);
  }

  // Runs every case, kConcurrent at a time, and checks how each ended.
  void run_all(const std::vector<Case>& cases) {
    std::vector<Running> running;
    std::size_t next = 0;
    while (next < cases.size() || !running.empty()) {
      // Reading /dev/zero to the 1 GiB bound takes a second alone and more beside
      // another case on a loaded machine: such a case runs by itself.
      const auto alone = [](const Case& c) { return c.value == "/dev/zero" && c.flag.kind == Kind::kInput; };
      while (running.size() < kConcurrent && next < cases.size() &&
             !(alone(cases[next]) && !running.empty()) &&
             std::none_of(running.begin(), running.end(), [&](const Running& r) { return alone(r.c); })) {
        running.push_back(start(cases[next], static_cast<int>(next)));
        ++next;
      }
      for (Running& r : running) feed(r);
      for (auto it = running.begin(); it != running.end();) {
        int status = 0;
        const pid_t done = ::waitpid(it->pid, &status, WNOHANG);
        const bool late = Clock::now() - it->started > kPatience;
        if (done != it->pid && !late) {
          ++it;
          continue;
        }
        Outcome o{.seconds = std::chrono::duration<double>(Clock::now() - it->started).count()};
        if (done != it->pid) {
          ::kill(-it->pid, SIGKILL);
          ::waitpid(it->pid, &status, 0);
          o.hung = true;
        } else if (WIFEXITED(status)) {
          o.status = WEXITSTATUS(status);
        } else {
          o.signal = WTERMSIG(status);
        }
        ::kill(-it->pid, SIGKILL);  // anything of its group still there
        check(*it, o);
        it = running.erase(it);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(listing(fixtures_), fixtures_listing_) << "a case changed the fixtures in " << fixtures_;
  }

  // A FIFO the case reads gets one line of garbage once weft has it open.
  static void feed(Running& r) {
    if (r.fed || r.c.fifo != Fifo::kFed) return;
    const int fd = ::open(r.c.value.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd < 0) return;  // no reader yet (ENXIO)
    [[maybe_unused]] const auto n = ::write(fd, "not json {\n", 11);
    ::close(fd);
    r.fed = true;
  }

  void check(const Running& r, const Outcome& o) {
    ++ran_;
    slowest_ = std::max(slowest_, o.seconds);
    const std::vector<std::string> wrong = problems(r, o);
    if (wrong.empty()) return;
    std::string command;
    for (const std::string& a : r.argv) command += (command.empty() ? "" : " ") + (a.empty() ? "''" : a);
    ADD_FAILURE() << fmt::format("{}\n  {} ({}), {:.2f} s\n  stderr: {}", fmt::join(wrong, "; "), command, r.c.what,
                                 o.seconds, read_text(r.dir / "stderr").substr(0, 1000));
  }

  // What is wrong with how case `r` ended; empty if nothing.
  static std::vector<std::string> problems(const Running& r, const Outcome& o) {
    std::vector<std::string> wrong;
    const std::string err = read_text(r.dir / "stderr");
    if (o.hung) wrong.push_back(fmt::format("still running after {} s", kPatience.count()));
    if (o.signal != 0) wrong.push_back(fmt::format("killed by signal {}", o.signal));
    if (!o.hung && o.signal == 0 && o.status != 2) wrong.push_back(fmt::format("exit status {}, not 2", o.status));
    // A file is named by its path (docs/errors.md: the file, or the flag).
    const bool file = r.c.flag.kind >= Kind::kInput && !r.c.value.empty();
    if (err.find(r.c.flag.name) == std::string::npos && !(file && err.find(r.c.value) != std::string::npos)) {
      wrong.push_back("the flag is not named");
    }
    if (!listing(r.dir / "cwd").empty()) wrong.push_back("files left in the working folder");
    std::set<std::string> left = listing(r.dir);
    for (const char* made : {"cwd", "stdout", "stderr", "file.fifo"}) left.erase(made);
    if (!left.empty()) wrong.push_back("files left beside the case's own: " + *left.begin());
    return wrong;
  }

  // Kills and reaps whatever of the cases' processes is left (adopted as subreaper).
  static void end_orphans() {
    for (pid_t pid : children()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }

  // Our children, from /proc.
  static std::vector<pid_t> children() {
    std::vector<pid_t> out;
    const std::string self = std::to_string(::getpid());
    std::error_code error;
    for (const auto& entry : fs::directory_iterator("/proc", error)) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string stat = read_text(entry.path() / "stat");
      const auto close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      std::string state, ppid;
      rest >> state >> ppid;
      if (ppid == self) out.push_back(std::stoi(name));
    }
    return out;
  }

  void snapshot_fixtures() { fixtures_listing_ = listing(fixtures_); }

  fs::path root_;
  fs::path fixtures_;
  std::set<std::string> fixtures_listing_;
  int ran_ = 0;
  double slowest_ = 0;
};

TEST(BadFlagsTable, TextFlagsAreAllClassified) {
  std::set<std::string> seen;
  for (const Flag& f : all_flags()) {
    seen.insert(f.command + " " + f.name);
    EXPECT_TRUE(f.classified) << f.command << " " << f.name << " (" << f.type
                              << "): add it to kTextFlags with what it names";
  }
  for (const auto& [flag, kind] : kTextFlags) EXPECT_TRUE(seen.contains(flag)) << flag << ": no longer a flag";
}

TEST_P(BadFlags, EveryFlagRefusesEveryBadValue) {
  std::vector<Case> cases;
  std::set<std::string> gaps;  // of kKnownGaps, those of this command
  for (const Flag& f : all_flags()) {
    if (f.command != GetParam() || !f.classified) continue;
    for (const Case& c : cases_of(f, fixtures_)) {
      const std::string key = gap_of(c);
      if (!kKnownGaps.contains(key)) {
        cases.push_back(c);
        continue;
      }
      gaps.insert(key);
      std::cout << fmt::format("known gap, not run: weft {} ({})\n", key, kKnownGaps.at(key));
    }
  }
  ASSERT_FALSE(cases.empty()) << "weft " << GetParam() << " has no flags here";
  for (const auto& [key, why] : kKnownGaps) {
    if (key.starts_with(GetParam() + " ")) EXPECT_TRUE(gaps.contains(key)) << key << ": no such case; fixed or renamed?";
  }
  snapshot_fixtures();
  const auto start = Clock::now();
  run_all(cases);
  std::cout << fmt::format("weft {}: {} cases in {:.1f} s, slowest {:.2f} s\n", GetParam(), ran_,
                           std::chrono::duration<double>(Clock::now() - start).count(), slowest_);
}

#ifdef WEFT_HAVE_RUNTIME
INSTANTIATE_TEST_SUITE_P(Commands, BadFlags,
                         testing::Values("plan", "simulate", "train", "profile", "bench", "netem", "run"));
#else
INSTANTIATE_TEST_SUITE_P(Commands, BadFlags, testing::Values("plan", "simulate", "netem"));
#endif

}  // namespace
}  // namespace weft::cli

// Note [Flag cases in forked children]: a job a case starts re-executes this
// binary as a worker; it runs the case's command line, as the weft binary would.
int main(int argc, char** argv) {
  const char* worker = std::getenv("WEFT_LAUNCHED_WORKER");
  const char* joined = std::getenv(weft::cli::kCaseArgvVariable);
  if (worker != nullptr && worker[0] != '\0' && joined != nullptr) {
    std::vector<std::string> args;
    std::string all(joined);
    for (std::size_t at = 0;;) {
      const std::size_t end = all.find('\x1f', at);
      args.push_back(all.substr(at, end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
    std::vector<char*> pointers;
    for (std::string& a : args) pointers.push_back(a.data());
    pointers.push_back(nullptr);
    return weft::cli::run_command_line(static_cast<int>(args.size()), pointers.data());
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
