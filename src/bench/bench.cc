#include "bench/bench.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/child.h"
#include "bench/metrics.h"
#include "bench/outputs.h"
#include "bench/plots.h"
#include "bench/report.h"
#include "bench/statistics.h"
#include "cost/host.h"
#include "netem/netem.h"
#include "profile/profile.h"
#include "schedule/encoding.h"
#include "schedulers/strategies.h"
#include "units/cores.h"
#include "units/files.h"

namespace weft::bench {
namespace {

namespace fs = std::filesystem;

// The outer optimizer as the runs were given it; what was not given is weft
// train's measured default (Note [Outer defaults, measured]).
std::string outer_text(const Training& t) {
  if (t.outer_optimizer == "none") return "";
  const auto value = [](const std::optional<double>& v) { return v ? fmt::format("{}", *v) : "default"; };
  return fmt::format("{} lr {} momentum {}", t.outer_optimizer, value(t.outer_lr), value(t.outer_momentum));
}

// Helper commands (probes, plan, simulate) take seconds; this is their limit.
constexpr Seconds kShortTimeout = 300;
// The network profile's message sizes are 4 KiB·4^k (runtime/measure/network_profile.h).
constexpr Bytes kSmallestMessage = 4 << 10;

// The encodings `strategy` runs in: --compression's; a parameter server's, those
// of the list its exchanges take, as the planner plans them (exchange_encodings).
std::vector<Encoding> encodings_of(const std::string& strategy, const std::vector<std::string>& compression) {
  std::vector<Encoding> encodings;
  for (const std::string& e : compression) encodings.push_back(parse_encoding(e, "--compression"));
  if (find_strategy(strategy).family == Family::kParameterServer) encodings = exchange_encodings(encodings);
  return encodings;
}

// --trace-strategy names one of the bench's weft runs: a strategy of --strategies
// alone (float32) or with an encoding of --compression, as the table names it.
void check_traced_run(const BenchOptions& options) {
  const std::string& name = options.trace_strategy;
  find_strategy(name.substr(0, name.find_first_of("+@")), "--trace-strategy");  // an unknown one: the accepted ones
  std::vector<std::string> runs;
  for (const std::string& s : options.strategies) {
    for (const Encoding& e : encodings_of(s, options.compression)) {
      for (const SiteMode& mode : options.site_modes) {
        if (site_mode_refusal(s, mode, options.training.H).empty()) {
          runs.push_back(weft_contender(s, to_string(e), mode).name);
        }
      }
    }
  }
  if (std::find(runs.begin(), runs.end(), name) == runs.end()) {
    throw UsageError(fmt::format("--trace-strategy {}: not one of this bench's weft runs; they are {}", name,
                                 fmt::join(runs, ", ")));
  }
}

// Where the workers run, for the bench's first line (Note [Hosts on cores]).
std::string describe_placement(CorePlacement placement, int workers) {
  return pinning_for(0, workers, placement).empty() ? "the processes on any core"
                                                    : "each process pinned to its share of the cores";
}

// A file-name-safe form of a link's name: "10MB/s" → "10MB_s".
std::string slug(std::string_view name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' ? c : '_';
  return out;
}

// The JSON value a command printed on stdout, from its log, which also holds its
// stderr: one value from the first line that starts with '{'.
std::string json_from_log(const std::string& log) {
  std::size_t start = log.starts_with("{") ? 0 : log.find("\n{");
  if (start == std::string::npos) return log;  // the parser will say what is wrong
  if (log[start] == '\n') ++start;
  std::istringstream in(log.substr(start));
  nlohmann::json value;
  try {
    in >> value;  // stops after one value: stderr lines after it do not matter
  } catch (const nlohmann::json::exception&) {
    return log.substr(start);
  }
  return value.dump();
}

// The smallest message size the network profile measures that is >= n.
Bytes network_max_bytes(Bytes n) {
  Bytes size = kSmallestMessage;
  while (size < n) size *= 4;
  return size;
}

class Bench {
 public:
  Bench(const BenchOptions& options, const netem::TerminationSignals& signals, std::ostream& progress)
      : o_(options), signals_(signals), progress_(progress), out_(fs::absolute(options.out)) {}

  BenchResults run();

 private:
  void say(const std::string& line) { progress_ << "weft bench: " << line << "\n" << std::flush; }
  std::string relative(const fs::path& p) const { return fs::relative(p, out_).string(); }
  LinkFiles files(const LinkResult& link) const {
    return {.profile = (out_ / link.profile).string(),
            .network = (out_ / link.network).string(),
            .host = link.host.empty() ? "" : (out_ / link.host).string()};
  }
  fs::path log(const std::string& name) const { return out_ / "logs" / (name + ".log"); }
  void save() { write_results(results_, out_ / "bench.json"); }
  // The tools with the next port of the cycle.
  Tools next_tools() {
    Tools t = o_.tools;
    t.port = o_.tools.port + (jobs_++ % kPortsCycled);
    return t;
  }

  // Runs a child (with the run timeout unless it has its own); throws
  // BenchInterrupted, after saving the results, if a signal arrived meanwhile.
  ChildResult run(ChildOptions child);
  // "exited with status 134 after 9.5s", "timed out after 30min".
  static std::string outcome(const ChildResult& r);
  // The command, its outcome and the end of its log.
  static std::string failure(const ChildResult& r, const fs::path& log);

  void probe_strategies();
  // Whether weft train takes `strategy` in site mode `mode` on `link` (Note
  // [Probing strategies]); if not, it is recorded in results_.skipped.
  bool site_mode_accepted(const std::string& strategy, const SiteMode& mode, const Link& link);
  void profile_model();
  LinkResult profile_network(const Link& link);
  // Every contender's prediction, by Bench::predicted_as.
  std::map<std::string, Prediction> predict(const Link& link, const LinkResult& network);
  // One `weft plan` of strategies of one architecture in one encoding →
  // plan-<link><suffix>.json; a lossy encoding's predictions are named
  // "<strategy>+<encoding>" and carry it in their options.
  std::map<std::string, Prediction> plan(const Link& link, const LinkResult& network,
                                         const std::vector<std::string>& strategies, std::string_view suffix,
                                         const std::string& encoding = "none", const SiteMode& mode = {});
  // The prediction a contender is measured against: its strategy in its
  // encoding; PostLocalSGD's only at the bench's H (flsgd's period).
  std::string predicted_as(const Contender& c) const;
  std::string trace_strategy(const std::map<std::string, Prediction>& plan) const;
  void keep_predicted_trace(const Link& link, const LinkResult& network, const Contender& contender,
                            const Prediction& prediction);
  // Note [Re-timed before each run]: the layers' compute per iteration timed
  // now, for run `name`; none if the timing failed (said on the progress stream).
  std::optional<Seconds> retime(const std::string& name);
  // The schedule `strategy` executes on the link, as its runs plan it (the
  // link's profile and fit, the tuned options), written once per link and
  // prediction `key` to runs/<link>-<key>.schedule.json; none if that failed
  // (said on the progress stream).
  std::optional<fs::path> schedule_of(const Link& link, const LinkResult& network, const std::string& key,
                                      const std::string& strategy, const Prediction& prediction);
  // `strategy`'s schedule on the link simulated again with every layer of the
  // link's profile `speed` times as long, for run `name` (Notes [Re-timed before
  // each run] and [Predicted on the run's own compute]), by `weft simulate
  // --schedule`; none if that failed (said on the progress stream). `tag` names
  // its files: runs/<name>.<tag>.profile.json and logs/<tag>-<name>.log.
  std::optional<Seconds> predict_scaled(const Link& link, const LinkResult& network, const std::string& key,
                                        const std::string& strategy, const Prediction& prediction, double speed,
                                        const std::string& name, const std::string& tag);
  // Trains a contender over the link; false if the run failed (it is recorded
  // in results_.failed). `repeat` counts from 0 (Note [Repeated runs]).
  bool train(const Link& link, const LinkResult& network, const Contender& contender,
             const std::map<std::string, Prediction>& plan, bool keep_trace, int repeat);
  // Adds one run of a strategy on a link; results_ then holds its median run.
  void record(RunResult run);
  void draw_plots();

  const BenchOptions& o_;
  const netem::TerminationSignals& signals_;
  std::ostream& progress_;
  const fs::path out_;
  BenchResults results_;
  std::vector<std::string> strategies_;  // those weft train accepts
  std::vector<Contender> contenders_;    // what each link trains: strategies_ in each encoding, then the peers
  int jobs_ = 0;
  int repeats_ = 1;  // runs of each contender per link: --seeds or --repeats
  int runs_done_ = 0, runs_total_ = 0;  // training runs, for progress lines
  // (link, strategy) -> every run of it, for record()
  std::map<std::pair<std::string, std::string>, std::vector<RunResult>> runs_by_strategy_;
  // (link, strategy) -> its schedule, for schedule_of()
  std::map<std::pair<std::string, std::string>, fs::path> schedules_;
};

ChildResult Bench::run(ChildOptions child) {
  if (child.timeout == 0) child.timeout = o_.run_timeout;
  const ChildResult r = run_child(child, signals_);
  if (r.interrupted_by != 0) {
    save();
    throw BenchInterrupted(r.interrupted_by,
                           fmt::format("interrupted by signal {} while running `{}`; the runs finished before "
                                       "are in {}",
                                       r.interrupted_by, r.command, (out_ / "bench.json").string()));
  }
  return r;
}

std::string Bench::outcome(const ChildResult& r) {
  return r.timed_out ? fmt::format("timed out after {}", format_duration(r.wall))
                     : fmt::format("exited with status {} after {}", r.exit_status, format_duration(r.wall));
}

std::string Bench::failure(const ChildResult& r, const fs::path& log) {
  return fmt::format("`{}` {}; the end of {}:\n{}", r.command, outcome(r), log.string(), log_tail(log));
}

// Note [Probing strategies].
void Bench::probe_strategies() {
  std::vector<std::string> candidates = o_.strategies;
  if (candidates.empty()) {
    for (const StrategyInfo& s : strategies()) candidates.emplace_back(s.name);
  }
  const bool sites = !o_.links.front().sites.empty();
  for (const std::string& s : candidates) {
    if (sites && uses_servers(s)) {  // Note [Sites in the bench]
      const std::string reason = "the sites hold the workers only; parameter servers would be in none";
      say(fmt::format("skipping {}: {}", s, reason));
      results_.skipped.push_back({.strategy = s, .reason = reason});
      continue;
    }
    const fs::path probe_log = log("probe-" + s);
    const ChildResult r =
        run({.argv = probe_command(o_.tools, o_.training, s), .log = probe_log, .timeout = kShortTimeout});
    if (r.exit_status == 0 || r.exit_status == 127 || r.timed_out) {
      throw std::runtime_error("probing which strategies weft train accepts went wrong: " + failure(r, probe_log));
    }
    const std::string text = read_file(probe_log);
    const std::size_t flag = text.find("--strategy");
    if (flag == std::string::npos) {
      strategies_.push_back(s);
      continue;
    }
    const std::string reason = text.substr(flag, text.find('\n', flag) - flag);
    say(fmt::format("skipping {}: weft train rejects it: {}", s, reason));
    results_.skipped.push_back({.strategy = s, .reason = reason});
  }
  if (strategies_.empty()) {
    throw UsageError(fmt::format("--strategies: weft train accepts none of {}", fmt::join(candidates, ", ")));
  }
  const Link& link = o_.links.front();  // the sites are every link's
  for (const std::string& s : strategies_) {
    for (const SiteMode& mode : o_.site_modes) {
      if (!site_mode_refusal(s, mode, o_.training.H).empty() || !site_mode_accepted(s, mode, link)) continue;
      for (const Encoding& e : encodings_of(s, o_.compression)) {
        contenders_.push_back(weft_contender(s, to_string(e), mode));
      }
    }
  }
  for (const std::string& p : o_.peers) contenders_.push_back(peer_contender(p));
}

// Note [Probing strategies], for a site mode.
bool Bench::site_mode_accepted(const std::string& strategy, const SiteMode& mode, const Link& link) {
  if (mode.flat()) return true;
  const std::string name = weft_contender(strategy, "none", mode).name;
  const fs::path probe_log = log("probe-" + slug(name));
  const ChildResult r = run(
      {.argv = probe_command(o_.tools, o_.training, strategy, link, mode), .log = probe_log, .timeout = kShortTimeout});
  if (r.exit_status == 0 || r.exit_status == 127 || r.timed_out) {
    throw std::runtime_error("probing which site modes weft train accepts went wrong: " + failure(r, probe_log));
  }
  const std::string text = read_file(probe_log);
  for (const char* flag : {"--strategy", "--hierarchical", "--site-every"}) {
    if (const std::size_t at = text.find(flag); at != std::string::npos) {
      const std::size_t line = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
      const std::string reason = text.substr(line, text.find('\n', at) - line);
      say(fmt::format("skipping {}: weft train rejects it: {}", name, reason));
      results_.skipped.push_back({.strategy = name, .reason = reason});
      return false;
    }
  }
  return true;
}

// Note [Profiling under contention].
void Bench::profile_model() {
  const int P = o_.tools.workers;
  say(fmt::format("profiling {} (batch {}) in {} processes together, as the workers will share the cores",
                  o_.training.model, o_.training.batch, P));
  const fs::path profile_log = log("profile");
  const ChildResult ran = run({.argv = model_profile_command(o_.tools, o_.training, (out_ / "profile.json").string()),
                               .log = profile_log});
  if (!ran.succeeded()) {
    throw std::runtime_error("profiling the model failed, and every prediction needs it: " +
                             failure(ran, profile_log));
  }
  const Profile profile = load_profile(out_ / "profile.json");
  results_.profile = "profile.json";
  results_.parameters = profile.total_params();
  say(fmt::format("profile: {} layers, {} parameters ({}), forward {} + backward {} per iteration", profile.size(),
                  profile.total_params(), format_bytes(profile.total_bytes()), format_duration(profile.forward_time()),
                  format_duration(profile.backward_time())));
}

LinkResult Bench::profile_network(const Link& link) {
  const Profile profile = load_profile(out_ / "profile.json");
  const Bytes max_bytes = network_max_bytes(profile.total_bytes());
  const fs::path file = out_ / fmt::format("net-{}.json", slug(link.name));
  const fs::path log_file = log(fmt::format("net-{}", slug(link.name)));
  say(fmt::format("{}: fitting the all-reduce cost a + b·n over {} workers, messages up to {}", link.name,
                  o_.tools.workers, format_bytes(max_bytes)));
  const ChildResult r =
      run({.argv = network_profile_command(next_tools(), link, max_bytes, file.string()), .log = log_file});
  if (!r.succeeded()) throw std::runtime_error(failure(r, log_file));
  const NetworkFit fit = parse_network_fit(read_file(file), file.string());
  say(fmt::format("{}: a = {}, 1/b = {}", link.name, format_duration(fit.a), format_bandwidth(1 / fit.b)));

  // Note [Interference per link].
  const fs::path measured = out_ / "logs" / fmt::format("interference-{}.json", slug(link.name));
  const fs::path measured_log = log(fmt::format("interference-{}", slug(link.name)));
  say(fmt::format("{}: timing the layers, and all-reduces of {} with them, over the link", link.name,
                  format_bytes(profile.total_bytes())));
  const fs::path host_file = out_ / fmt::format("host-{}.json", slug(link.name));
  const ChildResult p = run({.argv = link_profile_command(next_tools(), link, o_.training, measured.string(),
                                                          host_file.string()),
                             .log = measured_log});
  if (!p.succeeded()) throw std::runtime_error(failure(p, measured_log));
  Profile linked = load_profile(measured);
  linked.device += fmt::format("; measured over {} ({})", link.name, relative(measured));
  const fs::path profile_file = out_ / fmt::format("profile-{}.json", slug(link.name));
  save_profile(linked, profile_file);
  Host host = load_host(host_file);
  host.description += fmt::format("; over {}", link.name);
  save_host(host, host_file);
  say(fmt::format("{}: forward {} + backward {} per iteration; host: {} cores per {} workers, {:.2f} of a core per "
                  "message ({})",
                  link.name, format_duration(linked.forward_time()), format_duration(linked.backward_time()),
                  host.cores, host.processes, host.comm_cores, relative(host_file)));
  if (o_.verbose) {
    say(fmt::format("{}: host: message weight {:.2f}, core wait {}, skew {} ({} back to back, drift {:.3f} s/s)",
                    link.name, host.comm_weight, format_duration(host.core_wait), format_duration(host.skew),
                    format_duration(host.back_to_back_skew), host.drift));
  }
  return {.link = link.name, .bandwidth = link.bandwidth, .a = fit.a, .b = fit.b, .network = relative(file),
          .profile = relative(profile_file), .host = relative(host_file)};
}

// The planner plans one architecture at a time: the all-reduce strategies, with
// the wfbp and ddp references (so made in any case) → plan-<link>.json; the
// parameter-server ones, if any, with Training::servers servers →
// plan-<link>-ps.json.
std::map<std::string, Prediction> Bench::predict(const Link& link, const LinkResult& network) {
  std::vector<std::string> allreduce, ps;
  for (const std::string& s : strategies_) (uses_servers(s) ? ps : allreduce).push_back(s);
  std::map<std::string, Prediction> predictions =
      plan(link, network, allreduce.empty() ? std::vector<std::string>{"wfbp"} : allreduce, "");
  if (!ps.empty()) predictions.merge(plan(link, network, ps, "-ps"));
  // Each lossy encoding: the strategies run in it (plan_command adds wfbp and
  // ddp, which predicts the peers with a hook), the parameter-server ones apart.
  std::map<std::string, std::vector<std::string>> encoded, encoded_ps;
  for (const Contender& c : contenders_) {
    if (c.encoding == "none") continue;
    std::vector<std::string>& names = (!c.peer() && uses_servers(c.strategy) ? encoded_ps : encoded)[c.encoding];
    if (!c.peer()) names.push_back(c.strategy);
  }
  for (const auto& [encoding, names] : encoded) {
    predictions.merge(plan(link, network, names.empty() ? std::vector<std::string>{"wfbp"} : names,
                           "-" + slug(encoding), encoding));
  }
  for (const auto& [encoding, names] : encoded_ps) {
    predictions.merge(plan(link, network, names, "-ps-" + slug(encoding), encoding));
  }
  // Note [Sites in the bench]: each site mode in each encoding, planned for the
  // sites; a planner that cannot leaves those runs without a prediction.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> sited;  // (mode, encoding) -> strategies
  for (const Contender& c : contenders_) {
    if (!c.peer() && !c.sites.flat()) sited[{to_string(c.sites), c.encoding}].push_back(c.strategy);
  }
  for (const auto& [key, names] : sited) {
    const auto& [mode, encoding] = key;
    try {
      predictions.merge(plan(link, network, names, fmt::format("-{}{}", slug(mode), encoding == "none" ? "" : "-" +
                             slug(encoding)), encoding, parse_site_mode(mode)));
    } catch (const BenchInterrupted&) {
      throw;
    } catch (const std::exception& e) {  // a failed plan, or output the bench cannot read
      say(fmt::format("{}: no prediction for {} {}: {}", link.name, fmt::join(names, ", "), mode, e.what()));
    }
  }
  return predictions;
}

std::string Bench::predicted_as(const Contender& c) const {
  if (c.peer() && c.sited()) return "";  // torch's hierarchy: no weft schedule plans it
  if (c.period > 1 && c.period != o_.training.H) return "";  // no flsgd planned at that period
  const std::string name = c.encoding == "none" ? c.strategy : c.strategy + "+" + c.encoding;
  return c.sites.flat() ? name : name + "@" + to_string(c.sites);
}

std::map<std::string, Prediction> Bench::plan(const Link& link, const LinkResult& network,
                                              const std::vector<std::string>& strategies, std::string_view suffix,
                                              const std::string& encoding, const SiteMode& mode) {
  const std::string name = fmt::format("plan-{}{}", slug(link.name), suffix);
  const fs::path file = out_ / (name + ".json");
  const fs::path log_file = log(name);
  const ChildResult r =
      run({.argv = plan_command(o_.tools, link, o_.training, files(network), strategies, encoding, mode),
           .log = log_file,
           .timeout = kShortTimeout});
  if (!r.succeeded()) throw std::runtime_error(failure(r, log_file));
  const std::string plan = json_from_log(read_file(log_file));
  write_file_atomically(file, plan + "\n");
  std::map<std::string, Prediction> predictions = parse_plan(plan, file.string());
  if (encoding == "none" && mode.flat()) return predictions;
  // Named as the runs are: "strategy+encoding@mode"; rows of another mode than
  // asked for (a planner that tried variants) are left out.
  std::map<std::string, Prediction> named;
  const std::string wanted = mode.flat() ? "" : "@" + to_string(mode);
  for (auto& [row, prediction] : predictions) {
    const std::size_t at = row.find('@');
    const std::string strategy = row.substr(0, at);
    if ((at == std::string::npos ? "" : row.substr(at)) != wanted) continue;
    if (!prediction.options.is_object()) prediction.options = nlohmann::json::object();
    std::string key = strategy;
    if (encoding != "none") {
      prediction.options["compression"] = encoding;
      key += "+" + encoding;
    }
    set_site_mode(prediction.options, mode);
    named.emplace(key + wanted, std::move(prediction));
  }
  return named;
}

std::string Bench::trace_strategy(const std::map<std::string, Prediction>& plan) const {
  if (!o_.trace_strategy.empty()) return o_.trace_strategy;
  std::string best;
  for (const Contender& c : contenders_) {
    const auto it = plan.find(c.name);
    if (!c.peer() && it != plan.end() && (best.empty() || it->second.iteration < plan.at(best).iteration)) {
      best = c.name;
    }
  }
  return best;
}

void Bench::keep_predicted_trace(const Link& link, const LinkResult& network, const Contender& contender,
                                 const Prediction& prediction) {
  const std::string& strategy = contender.strategy;
  const fs::path trace = out_ / "trace-predicted.json";
  const fs::path log_file = log("simulate-" + slug(contender.name));
  const ChildResult r = run({.argv = simulate_command(o_.tools, link, o_.training, files(network), strategy,
                                                      prediction.options, trace.string()),
                             .log = log_file,
                             .timeout = kShortTimeout});
  if (!r.succeeded()) {
    say("could not draw the predicted trace: " + failure(r, log_file));
    return;
  }
  results_.traces = TracePair{.strategy = contender.name, .link = link.name, .predicted = relative(trace), .measured = ""};
}

std::optional<Seconds> Bench::retime(const std::string& name) {
  const fs::path file = out_ / "runs" / (name + ".retimed.json");
  const fs::path log_file = log("retime-" + name);
  const ChildResult r = run({.argv = retime_command(o_.tools, o_.training, file.string()),
                             .log = log_file,
                             .timeout = kShortTimeout});
  try {
    if (r.succeeded()) {
      const Profile retimed = load_profile(file);
      return retimed.forward_time() + retimed.backward_time();
    }
    say("could not re-time the layers: " + failure(r, log_file));
  } catch (const std::exception& e) {
    say(fmt::format("could not re-time the layers: {}", e.what()));
  }
  return std::nullopt;
}

std::optional<fs::path> Bench::schedule_of(const Link& link, const LinkResult& network, const std::string& name,
                                           const std::string& strategy, const Prediction& prediction) {
  const std::pair key{link.name, name};
  if (const auto made = schedules_.find(key); made != schedules_.end()) return made->second;
  const fs::path schedule = out_ / "runs" / fmt::format("{}-{}.schedule.json", slug(link.name), slug(name));
  const fs::path log_file = log(fmt::format("schedule-{}-{}", slug(link.name), slug(name)));
  std::vector<std::string> argv = simulate_command(o_.tools, link, o_.training, files(network), strategy,
                                                   prediction.options, "");
  argv.insert(argv.end(), {"--schedule-out", schedule.string()});
  const ChildResult r = run({.argv = argv, .log = log_file, .timeout = kShortTimeout});
  if (!r.succeeded()) {
    say(fmt::format("could not write {}'s schedule: {}", strategy, failure(r, log_file)));
    return std::nullopt;
  }
  return schedules_[key] = schedule;
}

std::optional<Seconds> Bench::predict_scaled(const Link& link, const LinkResult& network, const std::string& key,
                                             const std::string& strategy, const Prediction& prediction, double speed,
                                             const std::string& name, const std::string& tag) {
  const std::optional<fs::path> schedule = schedule_of(link, network, key, strategy, prediction);
  if (!schedule) return std::nullopt;
  Profile scaled = load_profile(out_ / network.profile);
  for (Layer& layer : scaled.layers) {
    layer.fp *= speed;
    layer.bp *= speed;
  }
  const fs::path profile = out_ / "runs" / fmt::format("{}.{}.profile.json", name, tag);
  save_profile(scaled, profile);
  const fs::path log_file = log(fmt::format("{}-{}", tag, name));
  LinkFiles scaled_files = files(network);
  scaled_files.profile = profile.string();
  const ChildResult r = run({.argv = simulate_schedule_command(o_.tools, link, o_.training, scaled_files, strategy,
                                                               schedule->string(),
                                                               !site_mode_of(prediction.options).flat()),
                             .log = log_file,
                             .timeout = kShortTimeout});
  try {
    if (r.succeeded()) return parse_simulated_iteration(json_from_log(read_file(log_file)), log_file.string());
    say(fmt::format("could not predict {} ({}): {}", strategy, tag, failure(r, log_file)));
  } catch (const UsageError& e) {
    say(fmt::format("could not predict {} ({}): {}", strategy, tag, e.what()));
  }
  return std::nullopt;
}

bool Bench::train(const Link& link, const LinkResult& network, const Contender& contender,
                  const std::map<std::string, Prediction>& plan, bool keep_trace, int repeat) {
  const bool peer = contender.peer();
  const std::string& strategy = contender.name;
  const std::string key = predicted_as(contender);
  const auto predicted = plan.find(key);
  const Prediction* prediction = predicted != plan.end() ? &predicted->second : nullptr;
  const std::string name = fmt::format("{}-{}{}", slug(link.name), slug(strategy),
                                       repeats_ > 1 ? fmt::format(".{}", repeat + 1) : "");
  const fs::path metrics = out_ / "runs" / (name + ".jsonl");
  const fs::path trace = out_ / "trace-measured.json";
  const fs::path log_file = log(name);
  fs::remove(metrics);

  Training training = o_.training;
  if (!o_.seeds.empty()) training.seed = o_.seeds.at(static_cast<std::size_t>(repeat));
  const bool accuracy_mode = o_.mode == Mode::kAccuracy;
  const Tools tools = next_tools();
  nlohmann::json options = prediction ? prediction->options : nlohmann::json::object();
  if (contender.encoding != "none") options["compression"] = contender.encoding;
  if (!peer) set_site_mode(options, contender.sites);
  const std::vector<std::string> argv =
      peer ? ddp_command(tools, link, training, contender.remedy, results_.parameters,
                         accuracy_mode ? o_.target_accuracy : 0, metrics.string())
           : train_command(tools, link, training, contender.strategy, options, files(network), metrics.string(),
                           keep_trace ? trace.string() : "");
  say(fmt::format("[{}/{}] {}: training {} ({} workers, {} steps{})", ++runs_done_, runs_total_, link.name,
                  strategy, o_.tools.workers, training.steps,
                  repeats_ > 1 ? fmt::format(", run {} of {}{}", repeat + 1, repeats_,
                                             o_.seeds.empty() ? "" : fmt::format(", seed {}", training.seed))
                               : ""));
  // Note [Re-timed before each run]: predicted once more, before it starts.
  std::optional<Seconds> retimed_compute, predicted_retimed;
  if (prediction && prediction->compute > 0) {
    retimed_compute = retime(name);
    if (retimed_compute) {
      predicted_retimed = predict_scaled(link, network, key, contender.strategy, *prediction,
                                         *retimed_compute / prediction->compute, name, "retimed");
    }
  }

  // Accuracy mode: stop the run once rank 0's evaluation reaches the target.
  MetricsTail tail(metrics);
  const auto reached = [&] {
    for (const EvalLine& e : tail.poll().evals) {
      if (e.rank == 0 && e.accuracy >= o_.target_accuracy) return true;
    }
    return false;
  };
  const ChildResult r = run({.argv = argv,
                             .log = log_file,
                             .stop_early = accuracy_mode ? std::function<bool()>(reached) : nullptr});
  // Progress shows the whole story; the results keep one line and the log's name.
  const auto fail = [&](const std::string& message, const std::string& details) {
    say(fmt::format("{} on {} failed: {}", strategy, link.name, details));
    results_.failed.push_back({.strategy = strategy, .link = link.name, .message = message, .log = relative(log_file)});
    save();
    return false;
  };
  if (!r.succeeded() && !r.stopped_early) return fail(outcome(r), failure(r, log_file));

  RunResult run{.strategy = strategy,
                .kind = peer ? kDdpPeerStrategy : "weft",
                .link = link.name,
                .bandwidth = link.bandwidth,
                .workers = o_.tools.workers,
                .period = peer || !prediction ? contender.period : prediction->period,
                .retimed_compute = retimed_compute,
                .predicted_retimed = predicted_retimed,
                .metrics = relative(metrics),
                .seed = training.seed};
  try {
    const Metrics m = load_metrics(metrics);
    const SteadyState steady = steady_iteration_time(m, {.warmup = o_.warmup, .period = run.period});
    run.measured_iteration = steady.iteration;
    run.measured_compute = steady.compute;
    run.steady_iterations = steady.iterations;
    run.final_loss = final_loss(m);
    run.steps = iterations_done(m);
    run.accuracy = accuracy_curve(m);
    if (const auto hit = first_reaching(run.accuracy, o_.target_accuracy); hit && accuracy_mode) {
      run.time_to_accuracy = hit->wall;
      run.training_time_to_accuracy = hit->training;
    }
  } catch (const UsageError& e) {
    const std::string message = fmt::format("its metrics cannot be used: {}", e.what());
    return fail(message, message);
  }
  if (prediction) {
    run.predicted_iteration = prediction->iteration;
    run.predicted_compute = prediction->compute;
    run.predicted_slowed_compute = prediction->slowed_compute;
    run.predicted_speedup_vs_wfbp = prediction->speedup_vs_wfbp;
    // Note [Predicted on the run's own compute].
    if (run.measured_compute && prediction->slowed_compute && *prediction->slowed_compute > 0) {
      run.predicted_on_own_compute = predict_scaled(link, network, key, contender.strategy, *prediction,
                                                    *run.measured_compute / *prediction->slowed_compute, name,
                                                    "own-compute");
    }
  }
  say(fmt::format("{} on {}: {} per iteration measured, {} predicted{}{}", strategy, link.name,
                  format_duration(run.measured_iteration),
                  run.predicted_iteration ? format_duration(*run.predicted_iteration) : "none",
                  run.error_pct() ? fmt::format(" ({:+.1f}%)", *run.error_pct()) : "",
                  run.time_to_accuracy ? fmt::format("; {:.3g}% after {}", 100 * o_.target_accuracy,
                                                     format_duration(*run.time_to_accuracy))
                                       : ""));
  if (o_.verbose) {
    say(fmt::format("{} on {}: median of {} steady iterations{}{}{}", strategy, link.name, run.steady_iterations,
                    run.measured_compute && run.predicted_compute
                        ? fmt::format("; computing {} against the profile's {}{}",
                                      format_duration(*run.measured_compute), format_duration(*run.predicted_compute),
                                      run.predicted_slowed_compute
                                          ? fmt::format(" and the plan's {} (slowed where it overlaps messages)",
                                                        format_duration(*run.predicted_slowed_compute))
                                          : "")
                        : "",
                    run.retimed_error_pct()
                        ? fmt::format("; re-timed at {} before the run, {} ({:+.1f}%) predicted on that",
                                      format_duration(*run.retimed_compute), format_duration(*run.predicted_retimed),
                                      *run.retimed_error_pct())
                        : "",
                    run.own_compute_error_pct()
                        ? fmt::format("; {} ({:+.1f}%) predicted on the run's compute",
                                      format_duration(*run.predicted_on_own_compute), *run.own_compute_error_pct())
                        : ""));
  }
  record(std::move(run));
  if (keep_trace && results_.traces && fs::exists(trace)) results_.traces->measured = relative(trace);
  compute_speedups(results_);
  save();
  return true;
}

void Bench::record(RunResult run) {
  std::vector<RunResult>& runs = runs_by_strategy_[{run.link, run.strategy}];
  runs.push_back(std::move(run));
  // Note [Repeated runs]: the median by what the mode compares.
  const auto key = [&](const RunResult* r) {
    const Seconds never = std::numeric_limits<Seconds>::infinity();
    return o_.mode == Mode::kAccuracy ? std::pair{r->time_to_accuracy.value_or(never), r->measured_iteration}
                                      : std::pair{r->measured_iteration, 0.0};
  };
  std::vector<const RunResult*> by_time;
  for (const RunResult& r : runs) by_time.push_back(&r);
  std::sort(by_time.begin(), by_time.end(), [&](const RunResult* x, const RunResult* y) { return key(x) < key(y); });
  RunResult median = *by_time[(by_time.size() - 1) / 2];
  median.measured_iterations.clear();
  median.times_to_accuracy.clear();
  for (const RunResult& r : runs) {
    median.measured_iterations.push_back(r.measured_iteration);
    median.times_to_accuracy.push_back(r.time_to_accuracy);
  }
  const auto same = [&](const RunResult& r) { return r.link == median.link && r.strategy == median.strategy; };
  if (const auto it = std::find_if(results_.runs.begin(), results_.runs.end(), same); it != results_.runs.end()) {
    *it = std::move(median);
  } else {
    results_.runs.push_back(std::move(median));
  }
}

void Bench::draw_plots() {
  std::vector<PlotText> plots{iteration_time_plot(results_)};
  if (o_.mode == Mode::kAccuracy) {
    // Every run's curve, each seed's labelled, not only the medians.
    BenchResults every = results_;
    every.runs.clear();
    for (const RunResult& median : results_.runs) {
      for (RunResult run : runs_by_strategy_.at({median.link, median.strategy})) {
        if (repeats_ > 1) {
          run.strategy += run.seed && !o_.seeds.empty() ? fmt::format(" (seed {})", *run.seed) : "";
        }
        every.runs.push_back(std::move(run));
      }
    }
    plots.push_back(accuracy_plot(every));
  }
  for (const PlotText& plot : plots) {
    try {
      say("plot: " + render(plot, out_).string());
    } catch (const std::exception& e) {
      say(fmt::format("could not draw {}: {}", plot.name, e.what()));
    }
  }
}

BenchResults Bench::run() {
  fs::create_directories(out_ / "logs");
  fs::create_directories(out_ / "runs");
  const Training& t = o_.training;
  results_ = {.model = t.model,
              .workers = o_.tools.workers,
              .batch = t.batch,
              .lr = t.lr,
              .optimizer = t.optimizer,
              .H = t.H,
              .outer = outer_text(t),
              .steps = t.steps,
              .warmup = o_.warmup,
              .mode = o_.mode,
              .target_accuracy = o_.target_accuracy,
              .emulated = o_.links.front().emulated(),
              .mtu = o_.links.front().emulated() ? o_.tools.mtu : 0,
              .cores = o_.tools.cores};
  probe_strategies();
  repeats_ = o_.seeds.empty() ? o_.repeats : static_cast<int>(o_.seeds.size());
  runs_total_ = static_cast<int>(o_.links.size() * contenders_.size()) * repeats_;
  std::vector<std::string> links, names;
  for (const Link& link : o_.links) links.push_back(link.name);
  for (const Contender& c : contenders_) names.push_back(c.name);
  say(fmt::format("{} training run{}: {} on {}{}; {}", runs_total_, runs_total_ == 1 ? "" : "s",
                  fmt::join(names, ", "), fmt::join(links, ", "),
                  results_.mtu > 0 ? fmt::format(" ({}-byte frames)", results_.mtu) : "",
                  describe_placement(o_.tools.cores, o_.tools.workers)));
  profile_model();
  save();

  for (std::size_t k = 0; k < o_.links.size(); ++k) {
    const Link& link = o_.links[k];
    const LinkResult network = profile_network(link);
    results_.links.push_back(network);
    save();
    const std::map<std::string, Prediction> plan = predict(link, network);
    // The traces: on the first link, the chosen strategy, trained first; should its
    // run fail, the next one that succeeds.
    std::vector<Contender> order = contenders_;
    bool tracing = false;
    if (k == 0) {
      const std::string chosen = trace_strategy(plan);
      const auto it = std::find_if(order.begin(), order.end(), [&](const Contender& c) { return c.name == chosen; });
      if (it != order.end() && !it->peer()) {
        std::rotate(order.begin(), it, it + 1);
        tracing = true;
      }
    }
    for (int repeat = 0; repeat < repeats_; ++repeat) {
      for (const Contender& c : order) {
        const bool traceable = tracing && !c.peer();
        if (traceable && plan.contains(c.name)) keep_predicted_trace(link, network, c, plan.at(c.name));
        const bool ok = train(link, network, c, plan, traceable, repeat);
        tracing = traceable && !ok;
      }
      tracing = false;  // the traces are of the first run
    }
  }
  draw_plots();
  save();
  return results_;
}

}  // namespace

BenchResults run_bench(const BenchOptions& options, const netem::TerminationSignals& signals,
                       std::ostream& progress) {
  if (options.tools.workers < 2) {
    throw UsageError(fmt::format("--workers {}: expected an integer >= 2 (with one worker nothing is communicated)",
                                 options.tools.workers));
  }
  if (options.links.empty()) throw UsageError("--bandwidths: give at least one bandwidth");
  netem::check_mtu(options.tools.mtu);
  if (options.repeats < 1) {
    throw UsageError(fmt::format("--repeats {}: expected an integer >= 1", options.repeats));
  }
  if (options.warmup < 0) throw UsageError(fmt::format("--warmup {}: expected an integer >= 0", options.warmup));
  if (options.training.steps <= options.warmup) {
    throw UsageError(fmt::format("--steps {}: expected more than the warm-up of {} iterations",
                                 options.training.steps, options.warmup));
  }
  if (!(options.target_accuracy > 0 && options.target_accuracy <= 1)) {
    throw UsageError(fmt::format("--target-accuracy {}: expected a fraction in (0, 1], e.g. 0.85",
                                 options.target_accuracy));
  }
  // Unknown names fail here, before the output folder is made.
  for (const std::string& s : options.strategies) find_strategy(s, "--strategies");
  if (options.compression.empty()) throw UsageError("--compression: give at least one encoding, e.g. none");
  for (const std::string& e : options.compression) parse_encoding(e, "--compression");
  for (const std::string& p : options.peers) peer_contender(p);
  // Note [Sites in the bench]: the sites are every link's.
  const bool sites = !options.links.front().sites.empty();
  for (const Link& link : options.links) {
    if (link.sites.empty() != sites) continue;
    throw std::logic_error(fmt::format("run_bench: link {} and link {} differ in having sites",
                                       options.links.front().name, link.name));
  }
  if (options.site_modes.empty()) throw UsageError("--site-averaging: give at least one, e.g. flat");
  for (const SiteMode& mode : options.site_modes) {
    if (!mode.flat() && !sites) {
      throw UsageError(fmt::format("--site-averaging {}: averages by sites; give the sites (--sites AxB with "
                                   "--wan-bandwidth, or --topology FILE)",
                                   to_string(mode)));
    }
  }
  for (const std::string& p : options.peers) {
    if (peer_contender(p).sited() && !sites) {
      throw UsageError(fmt::format("--peers {}: HierarchicalModelAverager averages inside sites; give the sites "
                                   "(--sites AxB with --wan-bandwidth, or --topology FILE)",
                                   p));
    }
  }
  if (sites) {
    for (const std::string& s : options.strategies) {
      if (uses_servers(s)) {
        throw UsageError(fmt::format("--strategies {}: a parameter-server strategy does not run in sites (they hold "
                                     "the workers only); leave it out or the sites",
                                     s));
      }
    }
  }
  if (!options.trace_strategy.empty()) check_traced_run(options);
  return Bench(options, signals, progress).run();
}

}  // namespace weft::bench
