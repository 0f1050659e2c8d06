#include "bench/commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "netem/shaping.h"

namespace weft::bench {
namespace {

using namespace weft::literals;

const Tools kTools{.weft = "/opt/weft", .python = "/usr/bin/python3", .ddp_peer = "tools/ddp_peer.py",
                   .workers = 3, .port = 29600};
const Link kEmulated{.name = "100Mbit", .bandwidth = 100_Mbit};
const Link kLoopback{.name = "loopback", .bandwidth = 0};

bool has(const std::vector<std::string>& argv, const std::string& flag, const std::string& value) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == flag && argv[i + 1] == value) return true;
  }
  return false;
}

bool contains(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

// The part after `weft netem ... --`.
std::vector<std::string> inner(const std::vector<std::string>& argv) {
  const auto dashes = std::find(argv.begin(), argv.end(), "--");
  return dashes == argv.end() ? argv : std::vector<std::string>(dashes + 1, argv.end());
}

TEST(Commands, EmulatedRunsGoThroughNetemOncePerWorker) {
  const nlohmann::json options{{"partition_B", 65536}, {"credit_B", 262144}, {"windows", {1, 2}}};
  const auto argv = train_command(kTools, kEmulated, {}, "bytescheduler", options, {"/o/profile.json", "/o/net.json"},
                                  "/o/m.jsonl", "");
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "/opt/weft");
  EXPECT_EQ(argv[1], "netem");
  EXPECT_TRUE(has(argv, "--workers", "3"));
  EXPECT_TRUE(has(argv, "--port", "29600"));
  EXPECT_TRUE(has(argv, "--mtu", std::to_string(kTools.mtu)));
  EXPECT_EQ(parse_bandwidth(argv[std::find(argv.begin(), argv.end(), "--bandwidth") - argv.begin() + 1]), 100_Mbit);
  const auto train = inner(argv);
  EXPECT_EQ(train[0], "/opt/weft");
  EXPECT_EQ(train[1], "train");
  EXPECT_TRUE(has(train, "--strategy", "bytescheduler"));
  EXPECT_TRUE(has(train, "--partition", "65536"));
  EXPECT_TRUE(has(train, "--credit", "262144"));
  EXPECT_TRUE(has(train, "--profile", "/o/profile.json"));
  EXPECT_TRUE(has(train, "--network", "/o/net.json"));
  EXPECT_TRUE(has(train, "--metrics", "/o/m.jsonl"));
  EXPECT_FALSE(contains(train, "--nproc"));  // the ranks come from netem's environment
  EXPECT_FALSE(contains(train, "--trace"));
  EXPECT_FALSE(contains(train, "--windows"));
}

TEST(Commands, LoopbackRunsUseTheProgramsOwnLauncher) {
  const auto train = train_command(kTools, kLoopback, {.steps = 20, .eval_every = 10}, "wfbp", {}, {"p", "n"}, "m", "t");
  EXPECT_EQ(train[1], "train");
  EXPECT_TRUE(has(train, "--nproc", "3"));
  EXPECT_TRUE(has(train, "--steps", "20"));
  EXPECT_TRUE(has(train, "--eval-every", "10"));
  EXPECT_TRUE(has(train, "--trace", "t"));
  EXPECT_FALSE(contains(train, "netem"));
  const auto profile = link_profile_command(kTools, kLoopback, {}, "profile-loopback.json", "host-loopback.json");
  EXPECT_TRUE(has(profile, "--nproc", "3"));
  EXPECT_TRUE(contains(profile, "--interference"));
  EXPECT_FALSE(contains(profile, "netem"));
  const auto retime = retime_command(kTools, {.batch = 16}, "retimed.json");
  EXPECT_TRUE(has(retime, "--nproc", "3"));
  EXPECT_TRUE(has(retime, "--batch", "16"));
  EXPECT_TRUE(has(retime, "--iterations", "100"));
  EXPECT_TRUE(has(retime, "--out", "retimed.json"));
  EXPECT_FALSE(contains(retime, "--interference"));
  const auto net = network_profile_command(kTools, kLoopback, 1 << 20, "net.json");
  EXPECT_TRUE(has(net, "--nproc", "3"));
  EXPECT_TRUE(has(net, "--max-bytes", "1048576"));
  const auto ddp = ddp_command(kTools, kLoopback, {}, "none", 91706, 0, "m");
  EXPECT_EQ(ddp[0], "/usr/bin/python3");
  EXPECT_TRUE(has(ddp, "--remedy", "none"));
  EXPECT_TRUE(has(ddp, "--nproc", "3"));
  EXPECT_TRUE(has(ddp, "--port", "29600"));
  EXPECT_TRUE(has(ddp, "--expect-parameters", "91706"));
  EXPECT_FALSE(contains(ddp, "--target-accuracy"));
  EXPECT_THROW(under_netem(kTools, kLoopback, {"x"}), std::logic_error);
}

// --cores reaches every program that starts the job's processes, under netem and
// on loopback alike; the default (auto) is the programs' own and goes unsaid.
TEST(Commands, ThePlacementReachesEveryLauncher) {
  Tools pinned = kTools;
  pinned.cores = CorePlacement::kPinned;
  for (const Link& l : {kEmulated, kLoopback}) {
    const std::vector<std::vector<std::string>> commands{
        train_command(pinned, l, {}, "wfbp", {}, {"p", "n"}, "m", ""),
        link_profile_command(pinned, l, {}, "profile.json", "host.json"),
        network_profile_command(pinned, l, 1 << 20, "net.json"),
        ddp_command(pinned, l, {}, "fp16", 91706, 0, "m")};
    for (const auto& argv : commands) {
      EXPECT_EQ(std::count(argv.begin(), argv.end(), "--cores"), 1) << l.name << ": " << argv[1];
      EXPECT_TRUE(has(argv, "--cores", "pinned")) << l.name << ": " << argv[1];
    }
  }
  EXPECT_TRUE(has(retime_command(pinned, {}, "r.json"), "--cores", "pinned"));
  EXPECT_TRUE(has(model_profile_command(pinned, {}, "p.json"), "--cores", "pinned"));
  EXPECT_FALSE(contains(train_command(kTools, kEmulated, {}, "wfbp", {}, {"p", "n"}, "m", ""), "--cores"));
  EXPECT_FALSE(contains(retime_command(kTools, {}, "r.json"), "--cores"));
}

TEST(Commands, TheDdpPeerGetsTheSameTrainingAsWeft) {
  const Training t{.model = "cnn", .batch = 16, .lr = 0.125, .optimizer = "momentum", .seed = 4, .steps = 33,
                   .eval_every = 11};
  const auto weft = inner(train_command(kTools, kEmulated, t, "wfbp", {}, {"p", "n"}, "m", ""));
  const auto ddp = inner(ddp_command(kTools, kEmulated, t, "powersgd:2", 91706, 0.85, "m"));
  EXPECT_TRUE(has(ddp, "--remedy", "powersgd:2"));
  EXPECT_EQ(ddp[0], "/usr/bin/python3");
  EXPECT_EQ(ddp[1], "tools/ddp_peer.py");
  for (const char* flag : {"--model", "--batch", "--lr", "--optimizer", "--seed", "--steps", "--eval-every"}) {
    const auto w = std::find(weft.begin(), weft.end(), flag);
    ASSERT_NE(w, weft.end()) << flag;
    EXPECT_TRUE(has(ddp, flag, *(w + 1))) << flag;
  }
  EXPECT_TRUE(has(ddp, "--target-accuracy", "0.85"));
}

// Rates go to the children exactly: whatever the user wrote parses back to the
// same bytes/s.
TEST(Commands, RatesAreHandedOnExactly) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> u(1e3, 1e11);
  for (int trial = 0; trial < 200; ++trial) {
    const Link link{.name = "x", .bandwidth = u(rng)};
    const int servers = trial % 3;
    const auto argv = under_netem(kTools, link, {"true"}, servers);
    EXPECT_EQ(has(argv, "--servers", std::to_string(servers)), servers > 0);
    const auto it = std::find(argv.begin(), argv.end(), "--bandwidth");
    ASSERT_NE(it, argv.end());
    EXPECT_EQ(parse_bandwidth(*(it + 1)), link.bandwidth);
  }
}

// The parameter server's transfers are costed from the bandwidth alone, so its
// plan, and the schedule its run builds, get the link's payload rate; the link
// itself is emulated at the rate asked for.
TEST(Commands, ParameterServerPlansGetWhatTcpDeliversOverTheLink) {
  const auto value_of = [](const std::vector<std::string>& argv, const std::string& flag) {
    const auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string("(none)") : *(it + 1);
  };
  const double payload = netem::payload_rate(100_Mbit, kTools.mtu);
  EXPECT_NEAR(payload / 100_Mbit, 1448.0 / 1514.0, 1e-12);
  const Training training{.servers = 1};
  EXPECT_EQ(parse_bandwidth(value_of(plan_command(kTools, kEmulated, training, {"p", "n"}, {"ps-interleaved"}),
                                     "--bandwidth")),
            payload);
  EXPECT_EQ(parse_bandwidth(value_of(plan_command(kTools, kEmulated, training, {"p", "n"}, {"dcredit"}), "--bandwidth")),
            100_Mbit);
  const auto run = train_command(kTools, kEmulated, training, "ps-interleaved", {}, {"p", "n"}, "m", "");
  EXPECT_EQ(parse_bandwidth(value_of(run, "--bandwidth")), 100_Mbit);         // netem's
  EXPECT_EQ(parse_bandwidth(value_of(inner(run), "--bandwidth")), payload);  // the run's plan
}

TEST(Commands, PlanAlwaysHasTheReferencesOnce) {
  const auto plan = plan_command(kTools, kEmulated, {}, {"p.json", "n.json"}, {"dcredit", "wfbp"});
  int wfbp = 0, ddp = 0, dcredit = 0;
  for (std::size_t i = 0; i + 1 < plan.size(); ++i) {
    if (plan[i] != "--strategy") continue;
    wfbp += plan[i + 1] == "wfbp";
    ddp += plan[i + 1] == "ddp";
    dcredit += plan[i + 1] == "dcredit";
  }
  EXPECT_EQ(wfbp, 1);
  EXPECT_EQ(ddp, 1);
  EXPECT_EQ(dcredit, 1);
  EXPECT_TRUE(contains(plan, "--json"));
  EXPECT_TRUE(has(plan, "--network", "n.json"));
  EXPECT_TRUE(has(plan, "--workers", "3"));
}

// Every command of a parameter-server strategy carries its servers, and no
// all-reduce command does: the ranks, the planner's cluster and the probe agree.
TEST(Commands, ParameterServerStrategiesBringTheirServersEverywhere) {
  for (const int servers : {1, 2}) {
    const Training t{.servers = servers};
    const std::string s = std::to_string(servers);
    for (const std::string strategy : {"ps", "ps-interleaved", "wfbp", "dreamddp-opt"}) {
      const bool ps = strategy.starts_with("ps");
      EXPECT_EQ(uses_servers(strategy), ps) << strategy;
      const auto emulated = train_command(kTools, kEmulated, t, strategy, {}, {"p", "n"}, "m", "");
      const auto netem = std::vector<std::string>(emulated.begin(), std::find(emulated.begin(), emulated.end(), "--"));
      EXPECT_EQ(has(netem, "--servers", s), ps) << strategy;
      EXPECT_EQ(has(inner(emulated), "--servers", s), ps) << strategy;
      const auto loopback = train_command(kTools, kLoopback, t, strategy, {}, {"p", "n"}, "m", "");
      EXPECT_TRUE(has(loopback, "--nproc", "3")) << strategy;  // workers; the launcher adds the servers
      EXPECT_EQ(has(loopback, "--servers", s), ps) << strategy;
      const auto probe = probe_command(kTools, t, strategy);
      EXPECT_EQ(has(probe, "--servers", s), ps) << strategy;
      EXPECT_TRUE(has(probe, "--steps", "0")) << strategy;
      const auto simulate = simulate_command(kTools, kEmulated, t, {"p", "n"}, strategy, {}, "trace");
      EXPECT_EQ(has(simulate, "--arch", "ps") && has(simulate, "--servers", s), ps) << strategy;
      EXPECT_EQ(contains(simulate, "--arch"), ps) << strategy;
      EXPECT_TRUE(has(simulate, "--trace", "trace")) << strategy;
      EXPECT_FALSE(contains(simulate_command(kTools, kEmulated, t, {"p", "n"}, strategy, {}, ""), "--trace"))
          << strategy;
      // A schedule as it was made: nothing that would plan it again.
      const auto again = simulate_schedule_command(kTools, kEmulated, t, {"p", "n"}, strategy, "s.json");
      EXPECT_TRUE(has(again, "--schedule", "s.json")) << strategy;
      EXPECT_TRUE(has(again, "--profile", "p")) << strategy;
      EXPECT_EQ(has(again, "--arch", "ps") && has(again, "--servers", s), ps) << strategy;
      for (const char* planning : {"--strategy", "--H", "--partition", "--credit"}) {
        EXPECT_FALSE(contains(again, planning)) << strategy << " " << planning;
      }
    }
  }
}

TEST(Commands, APlanHoldsOneArchitecture) {
  const auto ps = plan_command(kTools, kEmulated, {.servers = 2}, {"p.json", "n.json"}, {"ps-interleaved", "ps"});
  EXPECT_TRUE(has(ps, "--arch", "ps"));
  EXPECT_TRUE(has(ps, "--servers", "2"));
  EXPECT_TRUE(has(ps, "--strategy", "ps-interleaved"));
  EXPECT_FALSE(has(ps, "--strategy", "wfbp"));  // the planner would reject an all-reduce strategy on --arch ps
  EXPECT_FALSE(has(ps, "--strategy", "ddp"));
  EXPECT_FALSE(contains(plan_command(kTools, kEmulated, {}, {"p", "n"}, {"wfbp"}), "--arch"));
  EXPECT_THROW(plan_command(kTools, kEmulated, {}, {"p", "n"}, {"wfbp", "ps"}), std::logic_error);
  EXPECT_THROW(plan_command(kTools, kEmulated, {}, {"p", "n"}, {}), std::logic_error);
}

TEST(Commands, StrategyFlagsCarryOnlyTheTunedInputs) {
  EXPECT_TRUE(strategy_flags(nlohmann::json::object()).empty());
  EXPECT_TRUE(strategy_flags(nullptr).empty());
  EXPECT_TRUE(strategy_flags({{"H", 5}, {"sets", {1}}, {"groups", {{0, 1}}}}).empty());
  EXPECT_EQ(strategy_flags({{"partition_B", 4096}}), (std::vector<std::string>{"--partition", "4096"}));
}

// A run's name is its row; its strategy and encoding are what is planned and
// trained; a peer's prediction is the strategy that makes the same messages.
TEST(Commands, ContendersNameTheirRunsAndWhatPredictsThem) {
  const Contender plain = weft_contender("wfbp", "none");
  EXPECT_EQ(plain.name, "wfbp");
  EXPECT_FALSE(plain.peer());
  const Contender int8 = weft_contender("dcredit", "int8");
  EXPECT_EQ(int8.name, "dcredit+int8");
  EXPECT_EQ(int8.strategy, "dcredit");
  EXPECT_EQ(int8.encoding, "int8");
  EXPECT_EQ(weft_contender("flsgd", "fp16").name, "flsgd+fp16");  // the changes since the last average
  EXPECT_EQ(weft_contender("ps", "int8").name, "ps+int8");  // pushes and answers, element-wise
  EXPECT_THROW(weft_contender("ps", "powersgd:2"), UsageError);
  EXPECT_THROW(weft_contender("wfbp", "zip"), UsageError);

  const Contender ddp = peer_contender("ddp");
  EXPECT_EQ(ddp.name, "pytorch-ddp");
  EXPECT_EQ(ddp.remedy, "none");
  EXPECT_TRUE(ddp.peer());
  const Contender power = peer_contender("powersgd:2");
  EXPECT_EQ(power.name, "pytorch-ddp+powersgd:2");
  EXPECT_EQ(power.strategy, "ddp");
  EXPECT_EQ(power.encoding, "powersgd:2");
  const Contender local = peer_contender("postlocalsgd:8");
  EXPECT_EQ(local.name, "pytorch-postlocalsgd:8");
  EXPECT_EQ(local.strategy, "flsgd");
  EXPECT_EQ(local.period, 8);
  for (const char* bad : {"", "DDP", "powersgd", "powersgd:0", "powersgd:x", "postlocalsgd:-1", "fp16:2"}) {
    EXPECT_THROW(peer_contender(bad), UsageError) << bad;
  }
}

// The outer optimizer is local SGD's: weft train refuses it for any other family.
TEST(Commands, TheOuterOptimizerReachesOnlyLocalSgdRuns) {
  const Training t{.outer_optimizer = "nesterov", .outer_lr = 0.7, .outer_momentum = 0.9};
  const auto local = train_command(kTools, kLoopback, t, "flsgd", {}, {"p", "n"}, "m", "");
  EXPECT_TRUE(has(local, "--outer-optimizer", "nesterov"));
  EXPECT_TRUE(has(local, "--outer-lr", "0.7"));
  EXPECT_TRUE(has(local, "--outer-momentum", "0.9"));
  EXPECT_FALSE(contains(train_command(kTools, kLoopback, t, "wfbp", {}, {"p", "n"}, "m", ""), "--outer-optimizer"));
  EXPECT_FALSE(contains(train_command(kTools, kLoopback, {}, "flsgd", {}, {"p", "n"}, "m", ""), "--outer-optimizer"));
}

TEST(Commands, AnEncodingReachesThePlanTheTrainingAndTheSimulation) {
  const auto plan = plan_command(kTools, kLoopback, {}, {"p", "n"}, {"dcredit"}, "int8");
  EXPECT_TRUE(has(plan, "--compression", "int8"));
  EXPECT_FALSE(contains(plan_command(kTools, kLoopback, {}, {"p", "n"}, {"dcredit"}), "--compression"));
  const nlohmann::json options = {{"partition_B", 4096}, {"compression", "powersgd:2"}};
  EXPECT_TRUE(has(train_command(kTools, kLoopback, {}, "wfbp", options, {"p", "n"}, "m", ""), "--compression",
                  "powersgd:2"));
  EXPECT_TRUE(has(simulate_command(kTools, kLoopback, {}, {"p", "n"}, "wfbp", options, ""), "--compression",
                  "powersgd:2"));
}

// Note [Sites in the bench] (bench.h).
const Link kSited{.name = "2x2 sites 1Gbit+0.05ms, WAN 20Mbit+20ms",
                  .bandwidth = 1_Gbit,
                  .latency = 50e-6,
                  .sites = {.sites = "2x2", .wan_bandwidth = "20Mbit", .wan_latency = "20ms"}};
const Link kFromFile{.name = "topology two", .bandwidth = 100_Mbit, .sites = {.topology = "/t/two.json"}};

std::vector<std::string> before_dashes(const std::vector<std::string>& argv) {
  return {argv.begin(), std::find(argv.begin(), argv.end(), "--")};
}

// Every command under netem, weft's and the peers', runs in the same sites: each
// site's links at the link's rate and delay, the WAN's between them.
TEST(Commands, EveryRunOfASitedLinkIsInItsSites) {
  const std::vector<std::vector<std::string>> commands{
      train_command(kTools, kSited, {}, "wfbp", {}, {"p", "n"}, "m", ""),
      link_profile_command(kTools, kSited, {}, "profile.json", "host.json"),
      network_profile_command(kTools, kSited, 1 << 20, "net.json"),
      ddp_command(kTools, kSited, {}, "hierarchical:1:8", 91706, 0, "m"),
      ddp_command(kTools, kSited, {}, "powersgd:2", 91706, 0, "m")};
  for (const auto& argv : commands) {
    const auto netem = before_dashes(argv);
    EXPECT_EQ(netem[1], "netem");
    EXPECT_TRUE(has(netem, "--sites", "2x2"));
    EXPECT_TRUE(has(netem, "--wan-bandwidth", "20Mbit"));
    EXPECT_TRUE(has(netem, "--wan-latency", "20ms"));
    EXPECT_EQ(parse_bandwidth(netem[std::find(netem.begin(), netem.end(), "--bandwidth") - netem.begin() + 1]),
              1_Gbit);
    EXPECT_TRUE(contains(netem, "--latency"));
    EXPECT_FALSE(contains(inner(argv), "--sites"));  // a flat run plans on the fit
  }
  // A topology file gives every link: no --bandwidth or --latency beside it.
  const auto file = before_dashes(train_command(kTools, kFromFile, {}, "wfbp", {}, {"p", "n"}, "m", ""));
  EXPECT_TRUE(has(file, "--topology", "/t/two.json"));
  EXPECT_FALSE(contains(file, "--bandwidth"));
  EXPECT_FALSE(contains(file, "--sites"));
  EXPECT_FALSE(contains(file, "--wan-bandwidth"));
  // Servers would be in no site.
  EXPECT_THROW(under_netem(kTools, kSited, {"true"}, 1), std::logic_error);
  // No --wan-latency when none was given.
  Link no_delay = kSited;
  no_delay.sites.wan_latency.clear();
  EXPECT_FALSE(contains(under_netem(kTools, no_delay, {"true"}), "--wan-latency"));
}

TEST(Commands, SiteModesParseAndNameTheirRuns) {
  EXPECT_TRUE(parse_site_mode("flat").flat());
  EXPECT_EQ(parse_site_mode("hierarchical"), (SiteMode{.hierarchical = true}));
  EXPECT_EQ(parse_site_mode("site-every:2"), (SiteMode{.site_every = 2}));
  EXPECT_EQ(parse_site_mode("hierarchical+site-every:1"), (SiteMode{.hierarchical = true, .site_every = 1}));
  for (const char* word : {"flat", "hierarchical", "site-every:3", "hierarchical+site-every:1"}) {
    EXPECT_EQ(to_string(parse_site_mode(word)), word);
  }
  for (const char* bad : {"", "Flat", "hier", "site-every", "site-every:0", "site-every:x", "site-every:-1",
                          "hierarchical+", "hierarchical+flat", "site-every:1+hierarchical", "hierarchicalx"}) {
    try {
      parse_site_mode(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--site-averaging"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(weft_contender("flsgd", "none", {.hierarchical = true, .site_every = 1}).name,
            "flsgd@hierarchical+site-every:1");
  EXPECT_EQ(weft_contender("dcredit", "int8", {.hierarchical = true}).name, "dcredit+int8@hierarchical");
  EXPECT_EQ(weft_contender("dcredit", "none", {}).name, "dcredit");
  // Which strategies take which mode.
  EXPECT_EQ(site_mode_refusal("wfbp", {.hierarchical = true}, 5), "");
  EXPECT_NE(site_mode_refusal("ps", {.hierarchical = true}, 5), "");
  EXPECT_NE(site_mode_refusal("wfbp", {.site_every = 1}, 5), "");
  EXPECT_EQ(site_mode_refusal("flsgd", {.hierarchical = true, .site_every = 1}, 4), "");
  EXPECT_NE(site_mode_refusal("flsgd", {.site_every = 3}, 4), "");  // 3 does not divide H = 4
}

// A run averaging by sites is planned, simulated, probed and trained for the
// sites, with its mode's flags, and without the fit (which measured one flat ring).
TEST(Commands, ASitedRunIsPlannedAndTrainedForItsSites) {
  const Training t{.H = 4};
  const SiteMode mode{.hierarchical = true, .site_every = 1};
  nlohmann::json options{{"partition_B", 4096}};
  set_site_mode(options, mode);
  EXPECT_EQ(site_mode_of(options), mode);
  EXPECT_EQ(strategy_flags(options),
            (std::vector<std::string>{"--partition", "4096", "--hierarchical", "--site-every", "1"}));
  const auto expect_sited = [](const std::vector<std::string>& argv, const std::string& what) {
    EXPECT_TRUE(has(argv, "--sites", "2x2")) << what;
    EXPECT_TRUE(has(argv, "--wan-bandwidth", "20Mbit")) << what;
    EXPECT_TRUE(has(argv, "--wan-latency", "20ms")) << what;
    EXPECT_TRUE(contains(argv, "--latency")) << what;
    EXPECT_FALSE(contains(argv, "--network")) << what;
    EXPECT_TRUE(has(argv, "--profile", "p")) << what;
  };
  const auto train = inner(train_command(kTools, kSited, t, "flsgd", options, {"p", "n"}, "m", ""));
  expect_sited(train, "train");
  EXPECT_TRUE(contains(train, "--hierarchical"));
  EXPECT_TRUE(has(train, "--site-every", "1"));
  EXPECT_EQ(parse_bandwidth(train[std::find(train.begin(), train.end(), "--bandwidth") - train.begin() + 1]), 1_Gbit);
  const auto plan = plan_command(kTools, kSited, t, {"p", "n"}, {"flsgd"}, "none", mode);
  expect_sited(plan, "plan");
  EXPECT_TRUE(contains(plan, "--hierarchical"));
  EXPECT_TRUE(has(plan, "--site-every", "1"));
  EXPECT_FALSE(has(plan, "--strategy", "wfbp"));  // --site-every is local SGD's
  EXPECT_TRUE(has(plan, "--strategy", "flsgd"));
  expect_sited(simulate_command(kTools, kSited, t, {"p", "n"}, "flsgd", options, ""), "simulate");
  expect_sited(simulate_schedule_command(kTools, kSited, t, {"p", "n"}, "flsgd", "s.json", true), "schedule");
  const auto probe = probe_command(kTools, t, "flsgd", kSited, mode);
  EXPECT_TRUE(contains(probe, "--hierarchical"));
  EXPECT_TRUE(has(probe, "--site-every", "1"));
  EXPECT_TRUE(has(probe, "--sites", "2x2"));
  EXPECT_TRUE(has(probe, "--steps", "0"));
  // Flat runs of the same link keep the fit and plan no sites.
  const auto flat = inner(train_command(kTools, kSited, t, "flsgd", {}, {"p", "n"}, "m", ""));
  EXPECT_TRUE(has(flat, "--network", "n"));
  EXPECT_FALSE(contains(flat, "--sites"));
  EXPECT_FALSE(contains(flat, "--hierarchical"));
  EXPECT_FALSE(contains(probe_command(kTools, t, "flsgd", kSited, {}), "--sites"));
  EXPECT_TRUE(has(plan_command(kTools, kSited, t, {"p", "n"}, {"flsgd"}), "--strategy", "wfbp"));
  // A topology file: its sites, no rate or delay of the link's own.
  const auto file = inner(train_command(kTools, kFromFile, t, "flsgd", options, {"p", "n"}, "m", ""));
  EXPECT_TRUE(has(file, "--topology", "/t/two.json"));
  EXPECT_FALSE(contains(file, "--bandwidth"));
  EXPECT_FALSE(contains(file, "--network"));
  // A mode needs sites.
  EXPECT_THROW(plan_command(kTools, kEmulated, t, {"p", "n"}, {"flsgd"}, "none", mode), std::logic_error);
}

TEST(Commands, TheHierarchicalPeerIsTorchsAverager) {
  const Contender every_step = peer_contender("hierarchical:8");
  EXPECT_EQ(every_step.name, "pytorch-hierarchical:8");
  EXPECT_EQ(every_step.remedy, "hierarchical:1:8");
  EXPECT_EQ(every_step.period, 8);
  EXPECT_TRUE(every_step.sited());
  const Contender two = peer_contender("hierarchical:2:8");
  EXPECT_EQ(two.name, "pytorch-hierarchical:2:8");
  EXPECT_EQ(two.remedy, "hierarchical:2:8");
  EXPECT_FALSE(peer_contender("postlocalsgd:8").sited());
  EXPECT_TRUE(has(inner(ddp_command(kTools, kSited, {}, two.remedy, 91706, 0, "m")), "--remedy", "hierarchical:2:8"));
  for (const char* bad : {"hierarchical", "hierarchical:", "hierarchical:0", "hierarchical:1", "hierarchical:3:8",
                          "hierarchical:8:8", "hierarchical:8:2", "hierarchical:x:8", "hierarchical:1:2:4"}) {
    try {
      peer_contender(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--peers"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace weft::bench
