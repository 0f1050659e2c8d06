// EmulatedNetwork and run_emulated on the real kernel: namespaces, veth pairs, tbf.
// Needs root (label `root`); without it every test that touches the kernel skips
// with a message. ShapedLinksCarryTheConfiguredRate checks only that the shaping
// holds a transfer to the link's rate (no faster); how close it comes is the
// machine's and is printed, not asserted.
#include "netem/endpoint_testing.h"
#include "netem/netem.h"
#include "testing/testing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "netem/netns.h"
#include "netem/process.h"
#include "netem/shaping.h"
#include "units/cores.h"

namespace weft::netem {
namespace {

using testing::fork_in;
using testing::wait_exit_code;

using namespace weft::literals;

using test_support::process_alive;

constexpr int kPort = 5001;

// Accepts one connection, reads `bytes`, answers one byte. Exit code 0 on success.
int receive(long long bytes) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in any{.sin_family = AF_INET, .sin_port = htons(kPort), .sin_addr = {INADDR_ANY}};
  if (::bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) return 1;
  if (::listen(listener, 1) != 0) return 2;
  const int conn = ::accept(listener, nullptr, nullptr);
  if (conn < 0) return 3;
  std::vector<char> buffer(1 << 16);
  long long got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(conn, buffer.data(), buffer.size());
    if (n <= 0) return 4;
    got += n;
  }
  return ::write(conn, "k", 1) == 1 ? 0 : 5;
}

// Connects to `address` (retrying while the receiver starts), sends `bytes`, waits
// for the answer and writes the seconds from first byte to answer to `report_fd`.
int send_timed(const std::string& address, long long bytes, int report_fd) {
  sockaddr_in peer{.sin_family = AF_INET, .sin_port = htons(kPort), .sin_addr = {}};
  ::inet_pton(AF_INET, address.c_str(), &peer.sin_addr);
  int sock = -1;
  for (int attempt = 0; attempt < 300; ++attempt) {
    sock = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(sock, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0) break;
    ::close(sock);
    sock = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (sock < 0) return 1;
  const std::vector<char> data(static_cast<std::size_t>(bytes), 'x');
  const auto start = std::chrono::steady_clock::now();
  long long sent = 0;
  while (sent < bytes) {
    const ssize_t n = ::write(sock, data.data() + sent, static_cast<std::size_t>(bytes - sent));
    if (n <= 0) return 2;
    sent += n;
  }
  char answer;
  if (::read(sock, &answer, 1) != 1) return 3;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ::write(report_fd, &seconds, sizeof seconds) == sizeof seconds ? 0 : 4;
}

// Seconds to move `bytes` over TCP from endpoint `from` to endpoint `to`.
double timed_transfer(const Endpoint& from, const Endpoint& to, long long bytes) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t receiver = fork_in(to.netns, [&] { return receive(bytes); });
  const pid_t sender = fork_in(from.netns, [&] { return send_timed(to.address, bytes, fds[1]); });
  ::close(fds[1]);
  double seconds = -1;
  if (::read(fds[0], &seconds, sizeof seconds) != sizeof seconds) seconds = -1;
  ::close(fds[0]);
  EXPECT_EQ(wait_exit_code(sender), 0) << "sender";
  EXPECT_EQ(wait_exit_code(receiver), 0) << "receiver";
  return seconds;
}

class NetemTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{})
        << "namespaces of this test process were left behind";
  }
  std::string temp_dir() {
    const auto dir = std::filesystem::path(::testing::TempDir()) /
                     ("netem_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return dir.string();
  }
};

// (a) Both directions of a link carry its rate: worker 0's link is 10 Mbit and the
// server's 1 Gbit, so worker→server is limited by worker 0's upload (the tbf on its
// eth0) and server→worker by its download (the tbf on the hub's end). 1 MB at
// 10 Mbit is 0.8 s; TCP/IP headers on 1500-byte frames add 4.6% (Note [Token bucket
// parameters]).
TEST_F(NetemTest, ShapedLinksCarryTheConfiguredRate) {
  SKIP_UNLESS_PRIVILEGED();
  EmulatedNetwork network({.workers = 1, .servers = 1, .bandwidth = 10_Mbit,
                           .server_bandwidth = 1_Gbit});
  const Endpoint& worker = network.endpoints()[0];
  const Endpoint& server = network.endpoints()[1];
  constexpr long long kBytes = 1'000'000;
  const double ideal = kBytes / 10_Mbit;
  for (const auto& [from, to, direction] : {std::tuple{worker, server, "upload"},
                                            std::tuple{server, worker, "download"}}) {
    const double seconds = timed_transfer(from, to, kBytes);
    std::printf("%s of 1 MB at 10 Mbit: %.3f s (ideal %.3f s), %.2f Mbit/s of TCP payload\n",
                direction, seconds, ideal, kBytes * 8 / seconds / 1e6);
    RecordProperty(std::string(direction) + "_seconds", std::to_string(seconds));
    EXPECT_GT(seconds, 0.8 * ideal) << direction << ": faster than the link, so not shaped";
  }
}

// The process contract (top of netem.h): each rank sees its variables and runs in
// its own namespace, whose eth0 has its address.
TEST_F(NetemTest, RanksGetTheirVariablesInTheirNamespaces) {
  SKIP_UNLESS_PRIVILEGED();
  const std::string dir = temp_dir();
  const std::vector<std::string> argv = {
      "sh", "-c", R"(env > "$0/$RANK.env" && ip -4 -o addr show dev eth0 > "$0/$RANK.addr")", dir};
  const RunReport report = run_emulated(
      {.workers = 2, .servers = 1, .bandwidth = 100_Mbit, .master_port = 29999}, {argv, argv, argv},
      {.timeout = 60});
  ASSERT_EQ(report.exit_status, 0) << report.message;
  for (int rank = 0; rank < 3; ++rank) {
    std::map<std::string, std::string> env;
    std::ifstream in(dir + "/" + std::to_string(rank) + ".env");
    for (std::string line; std::getline(in, line);) {
      env[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
    }
    EXPECT_EQ(env["MASTER_ADDR"], "10.77.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "29999");
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["WEFT_WORKERS"], "2");
    EXPECT_EQ(env["WEFT_SERVERS"], "1");
    EXPECT_EQ(env["WEFT_ROLE"], rank < 2 ? "worker" : "server");
    EXPECT_EQ(env.count("WEFT_SERVER_RANK"), rank < 2 ? 0u : 1u);
    if (rank == 2) {
      EXPECT_EQ(env["WEFT_SERVER_RANK"], "0");
    }
    std::ifstream addr_file(dir + "/" + std::to_string(rank) + ".addr");
    std::stringstream addr;
    addr << addr_file.rdbuf();
    EXPECT_NE(addr.str().find("10.77.0." + std::to_string(rank + 1) + "/16"), std::string::npos)
        << addr.str();
  }
  std::filesystem::remove_all(dir);
}

// Note [Hosts on cores] (units/cores.h): pinned, each rank, servers too, runs on
// its share of the cores; shared, on any of them.
TEST_F(NetemTest, EachRankRunsWhereItsPlacementSays) {
  SKIP_UNLESS_PRIVILEGED();
  const std::string dir = temp_dir();
  const std::vector<std::string> argv = {"sh", "-c", R"(cat /proc/self/status > "$0/$RANK.status")", dir};
  const std::vector<int> all = usable_cores();
  for (const CorePlacement placement : {CorePlacement::kPinned, CorePlacement::kShared}) {
    const bool shared = placement == CorePlacement::kShared;
    const RunReport report =
        run_emulated({.workers = 2, .servers = 1, .bandwidth = 100_Mbit, .cores = placement}, {argv, argv, argv},
                     {.timeout = 60});
    ASSERT_EQ(report.exit_status, 0) << report.message;
    for (int rank = 0; rank < 3; ++rank) {
      std::ifstream in(dir + "/" + std::to_string(rank) + ".status");
      std::stringstream status;
      status << in.rdbuf();
      EXPECT_EQ(test_support::parse_core_list(status.str()), shared ? all : cores_of(all, rank, 3))
          << "rank " << rank << (shared ? ", shared cores" : "");
    }
  }
  std::filesystem::remove_all(dir);
}

// Note [Congestion control of the emulated hosts]: every endpoint's TCP is reno,
// whatever the machine's default.
TEST_F(NetemTest, EveryHostUsesRenoSoThatLinksRunFull) {
  SKIP_UNLESS_PRIVILEGED();
  EmulatedNetwork network({.workers = 2, .servers = 1, .bandwidth = 100_Mbit});
  for (const Endpoint& e : network.endpoints()) {
    const pid_t child = fork_in(e.netns, [] {
      std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
      std::string algorithm;
      in >> algorithm;
      return algorithm == "reno" ? 0 : 1;
    });
    EXPECT_EQ(wait_exit_code(child), 0) << e.netns << " does not use reno";
  }
}

// Note [Token bucket parameters]: no interface builds a packet that the smallest
// bucket would cut into frames, the faster server's included.
TEST_F(NetemTest, EveryInterfaceBuildsPacketsTheSmallestBucketPassesWhole) {
  SKIP_UNLESS_PRIVILEGED();
  EmulatedNetwork network({.workers = 2, .servers = 1, .bandwidth = 100_Mbit, .server_bandwidth = 1_Gbit});
  const std::string expected = std::to_string(token_bucket_for(100_Mbit, 1500).gso_max);
  const auto gso_sizes = [](const std::vector<std::string>& ip_show) {
    const CommandResult shown = run_command(ip_show);
    EXPECT_TRUE(shown.succeeded()) << join_command(ip_show) << ": " << shown.output;
    std::vector<std::string> sizes;
    std::istringstream words(shown.output);
    for (std::string word; words >> word;) {
      if (word == "gso_max_size" && words >> word) sizes.push_back(word);
    }
    return sizes;
  };
  for (const Endpoint& e : network.endpoints()) {
    EXPECT_EQ(gso_sizes({"ip", "-netns", e.netns, "-d", "link", "show", "eth0"}),
              std::vector<std::string>{expected})
        << e.netns;
  }
  EXPECT_EQ(gso_sizes({"ip", "-netns", network.hub(), "-d", "link", "show", "type", "veth"}),
            std::vector<std::string>(network.endpoints().size(), expected));
}

// (b) The destructor removes every namespace it made.
TEST_F(NetemTest, DestructionRemovesEveryNamespace) {
  SKIP_UNLESS_PRIVILEGED();
  std::vector<std::string> made;
  {
    EmulatedNetwork network({.workers = 3, .servers = 2, .bandwidth = 100_Mbit});
    made = network.namespaces();
    EXPECT_EQ(made.size(), 6u);
    EXPECT_EQ(namespaces_of(::getpid()).size(), 6u);
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
}

// (b) When a rank fails, run_emulated ends the others, what they started, and the
// network.
TEST_F(NetemTest, AFailedRankEndsTheJobAndLeavesNothing) {
  SKIP_UNLESS_PRIVILEGED();
  const std::string dir = temp_dir();
  const std::vector<std::string> sleeper = {
      "sh", "-c", R"(sleep 100 & echo $! > "$0/$RANK.bg"; wait)", dir};
  const RunReport report = run_emulated({.workers = 3, .bandwidth = 100_Mbit},
                                        {sleeper, {"sh", "-c", "sleep 0.3; exit 5"}, sleeper},
                                        {.grace = 0.2, .kill_after = 1});
  EXPECT_EQ(report.exit_status, 5);
  EXPECT_NE(report.message.find("worker 1 exited with status 5"), std::string::npos)
      << report.message;
  for (const ProcessExit& e : report.exits) EXPECT_FALSE(process_alive(e.pid)) << e.label;
  for (int rank : {0, 2}) {
    pid_t background = 0;
    std::ifstream(dir + "/" + std::to_string(rank) + ".bg") >> background;
    ASSERT_GT(background, 0);
    for (int i = 0; i < 200 && process_alive(background); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(process_alive(background)) << "rank " << rank << "'s background sleep";
  }
  std::filesystem::remove_all(dir);
}

// (b) SIGINT to a process inside run_emulated (as Ctrl-C to `weft netem`) ends the
// ranks and removes the network.
TEST_F(NetemTest, SigintEndsTheJobAndRemovesTheNetwork) {
  SKIP_UNLESS_PRIVILEGED();
  const std::string dir = temp_dir();
  const std::vector<std::string> argv = {"sh", "-c", R"(echo $$ > "$0/$RANK.pid"; exec sleep 100)", dir};
  const pid_t runner = ::fork();
  if (runner == 0) {
    int code = 99;
    try {
      code = run_emulated({.workers = 2, .bandwidth = 100_Mbit}, {argv, argv}).exit_status;
    } catch (...) {
    }
    ::_exit(code);
  }
  auto ready = [&] {
    return std::filesystem::exists(dir + "/0.pid") && std::filesystem::exists(dir + "/1.pid");
  };
  for (int i = 0; i < 1000 && !ready(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(ready());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both ranks exec'ed sleep
  EXPECT_EQ(namespaces_of(runner).size(), 3u);
  ::kill(runner, SIGINT);
  EXPECT_EQ(wait_exit_code(runner), 128 + SIGINT);
  EXPECT_EQ(namespaces_of(runner), std::vector<std::string>{});
  for (int rank : {0, 1}) {
    pid_t pid = 0;
    std::ifstream(dir + "/" + std::to_string(rank) + ".pid") >> pid;
    EXPECT_FALSE(process_alive(pid)) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
}

// (c) A failure in the middle of set-up, after the workers' links are shaped: the
// server's rate is below what tc can represent.
TEST_F(NetemTest, ARateTcRejectsLeavesNothingBehind) {
  SKIP_UNLESS_PRIVILEGED();
  try {
    EmulatedNetwork network({.workers = 2, .servers = 1, .bandwidth = 10_Mbit, .server_bandwidth = 0.01});
    ADD_FAILURE() << "a rate of 0.01 B/s was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("server 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tc"), std::string::npos) << e.what();
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
}

// (c) A failure while creating namespaces: one of the names is taken. Only what the
// constructor made is removed; the namespace it did not make is left alone.
TEST_F(NetemTest, ANameCollisionLeavesOnlyWhatWasThereBefore) {
  SKIP_UNLESS_PRIVILEGED();
  const std::string taken = namespace_prefix(::getpid()) + "w2";
  add_namespace(taken);
  EXPECT_THROW(EmulatedNetwork({.workers = 4, .bandwidth = 10_Mbit}), std::runtime_error);
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{taken});
  delete_namespace(taken);
}

// (d) A delay makes the hub a delaying switch in place of the bridge (Note [A
// delaying switch]); its ports are the hub's ends of the links, and it goes with the
// network. Round trips and rates are latency_test.cc's.
TEST_F(NetemTest, ALatencyReplacesTheBridgeByADelayingSwitch) {
  SKIP_UNLESS_PRIVILEGED();
  {
    EmulatedNetwork network({.workers = 2, .servers = 1, .bandwidth = 10_Mbit, .latency = 2_ms});
    ASSERT_NE(network.delay_line(), nullptr);
    const CommandResult bridges = run_command({"ip", "-netns", network.hub(), "-o", "link", "show", "type", "bridge"});
    EXPECT_EQ(bridges.output, "");
    const CommandResult ports = run_command({"ip", "-netns", network.hub(), "-o", "link", "show", "type", "veth"});
    for (const char* port : {" w0@", " w1@", " s0@"}) {
      EXPECT_NE(ports.output.find(port), std::string::npos) << ports.output;
    }
    EXPECT_EQ(ports.output.find("master"), std::string::npos) << ports.output;
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
  EmulatedNetwork plain({.workers = 1, .bandwidth = 10_Mbit});
  EXPECT_EQ(plain.delay_line(), nullptr);
}

// (d) SIGINT ends a job on delayed links as on any other, and SIGKILL leaves only
// namespaces, which the next network's sweep removes: the switch is a thread of the
// process that built the network, so nothing of it survives.
TEST_F(NetemTest, SignalsLeaveNothingOfADelayedNetwork) {
  SKIP_UNLESS_PRIVILEGED();
  const std::vector<std::string> argv = {"sleep", "100"};
  for (const int signal : {SIGINT, SIGKILL}) {
    const pid_t runner = ::fork();
    if (runner == 0) {
      int code = 99;
      try {
        code = run_emulated({.workers = 2, .bandwidth = 100_Mbit, .latency = 5_ms}, {argv, argv}).exit_status;
      } catch (...) {
      }
      ::_exit(code);
    }
    for (int i = 0; i < 1000 && namespaces_of(runner).size() < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the switch and the ranks started
    ASSERT_EQ(namespaces_of(runner).size(), 3u);
    ::kill(runner, signal);
    EXPECT_EQ(wait_exit_code(runner), 128 + signal);
    if (signal == SIGKILL) {
      EmulatedNetwork next({.workers = 1, .bandwidth = 10_Mbit});  // sweeps
    }
    EXPECT_EQ(namespaces_of(runner), std::vector<std::string>{}) << "after SIG" << sigabbrev_np(signal);
  }
}

// (e) The sweep removes the namespaces of a pid that is gone, and only those.
TEST_F(NetemTest, TheSweepRemovesNamespacesOfDeadPids) {
  SKIP_UNLESS_PRIVILEGED();
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  wait_exit_code(dead);
  const pid_t alive = ::fork();
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::vector<std::string> stale = {namespace_prefix(dead) + "h", namespace_prefix(dead) + "w0"};
  const std::string live = namespace_prefix(alive) + "w0";
  const std::string foreign = namespace_prefix(dead);  // no kind letter: not weft's
  for (const auto& name : stale) add_namespace(name);
  add_namespace(live);
  add_namespace(foreign);
  {
    EmulatedNetwork network({.workers = 1, .bandwidth = 10_Mbit});
    // Other dead runs' namespaces may be swept too; these must be.
    for (const auto& name : stale) {
      EXPECT_NE(std::find(network.swept().begin(), network.swept().end(), name), network.swept().end())
          << name;
    }
  }
  EXPECT_EQ(namespaces_of(dead), std::vector<std::string>{});
  EXPECT_EQ(namespaces_of(alive), std::vector<std::string>{live});
  const std::vector<std::string> all = list_namespaces();
  EXPECT_NE(std::find(all.begin(), all.end(), foreign), all.end());
  ::kill(alive, SIGKILL);
  wait_exit_code(alive);
  delete_namespace(live);
  delete_namespace(foreign);
}

// Without privileges the error says what is needed and how to run.
TEST_F(NetemTest, WithoutPrivilegesTheErrorSaysToUseSudo) {
  SKIP_UNLESS_PRIVILEGED();  // to become unprivileged, a test must start privileged
  const pid_t child = ::fork();
  if (child == 0) {
    // Leaving uid 0 for good clears every capability.
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(10);
    try {
      EmulatedNetwork network({.workers = 1, .bandwidth = 10_Mbit});
      ::_exit(11);
    } catch (const UsageError& e) {
      const std::string message = e.what();
      ::_exit(message.find("needs root") != std::string::npos &&
                      message.find("sudo weft netem") != std::string::npos &&
                      message.find("CAP_NET_ADMIN") != std::string::npos
                  ? 0
                  : 12);
    } catch (...) {
      ::_exit(13);
    }
  }
  EXPECT_EQ(wait_exit_code(child), 0);
}

TEST(NetemOptions, ValidateNamesTheFlagAndTheValue) {
  const NetemOptions good{.workers = 2, .bandwidth = 10_Mbit};
  EXPECT_NO_THROW(validate(good));
  const std::vector<std::pair<NetemOptions, std::string>> bad = {
      {{.workers = 0, .bandwidth = 10_Mbit}, "--workers 0"},
      {{.workers = 2, .servers = -1, .bandwidth = 10_Mbit}, "--servers -1"},
      {{.workers = 2, .bandwidth = 0}, "--bandwidth 0"},
      {{.workers = 2, .bandwidth = -5}, "--bandwidth -5"},
      {{.workers = 2, .bandwidth = 10_Mbit, .server_bandwidth = -1}, "--server-bandwidth -1"},
      {{.workers = 2, .bandwidth = 10_Mbit, .latency = -1e-3}, "--latency -0.001"},
      {{.workers = 2, .bandwidth = 10_Mbit, .master_port = 70000}, "--port 70000"},
      {{.workers = 2, .bandwidth = 10_Mbit, .mtu = 20}, "--mtu 20"},
      {{.workers = 70000, .bandwidth = 10_Mbit}, "--workers 70000"},
  };
  for (const auto& [options, expected] : bad) {
    try {
      validate(options);
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(RunEmulated, AMissingCommandIsAUsageErrorBeforeAnythingIsBuilt) {
  try {
    run_emulated({.workers = 1, .bandwidth = 10_Mbit}, {{"weft-no-such-command-xyz"}});
    ADD_FAILURE() << "accepted a missing command";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("weft-no-such-command-xyz"), std::string::npos) << e.what();
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{});
}

}  // namespace
}  // namespace weft::netem
