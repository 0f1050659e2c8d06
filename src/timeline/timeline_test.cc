#include "timeline/timeline.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace weft {
namespace {

using nlohmann::json;

Timeline two_workers(std::string source) {
  Timeline t;
  t.source = std::move(source);
  t.strategy = "wfbp";
  t.process_names = {"worker 0", "worker 1"};
  for (int w = 0; w < 2; ++w) {
    t.events.push_back({.worker = w, .lane = "compute", .name = "fp conv1", .start = 0,
                        .end = 1e-3, .iteration = 0, .layer = 0, .bytes = 0});
    t.events.push_back({.worker = w, .lane = "compute", .name = "bp conv1", .start = 1e-3,
                        .end = 3e-3, .iteration = 0, .layer = 0, .bytes = 0});
    t.events.push_back({.worker = w, .lane = "comm", .name = "allreduce conv1 \"x\"",
                        .start = 3e-3, .end = 5.5e-3, .iteration = 0, .layer = 0, .bytes = 1024});
  }
  return t;
}

std::vector<json> of_phase(const json& trace, std::string_view ph) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == ph) out.push_back(e);
  }
  return out;
}

TEST(ChromeTrace, ParsesBackWithEventsInMicroseconds) {
  const Timeline t = two_workers("simulated");
  const json trace = json::parse(chrome_trace_json({&t}));
  const auto x = of_phase(trace, "X");
  ASSERT_EQ(x.size(), t.events.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const Event& e = t.events[i];
    EXPECT_EQ(x[i].at("name"), e.name);
    EXPECT_EQ(x[i].at("pid"), e.worker);
    EXPECT_DOUBLE_EQ(x[i].at("ts").get<double>(), e.start * 1e6);
    EXPECT_DOUBLE_EQ(x[i].at("dur").get<double>(), (e.end - e.start) * 1e6);
    EXPECT_EQ(x[i].at("args").at("bytes"), e.bytes);
    EXPECT_EQ(x[i].at("args").at("layer"), e.layer);
    EXPECT_EQ(x[i].at("args").at("iteration"), e.iteration);
  }
  // One tid per lane, named by metadata.
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const json& m : of_phase(trace, "M")) {
    if (m.at("name") == "thread_name") {
      thread_names[{m.at("pid"), m.at("tid")}] = m.at("args").at("name");
    }
  }
  for (const json& e : x) {
    const std::string lane = thread_names.at({e.at("pid"), e.at("tid")});
    EXPECT_EQ(lane, e.at("name").get<std::string>().starts_with("allreduce") ? "comm" : "compute");
  }
}

TEST(ChromeTrace, SeveralTimelinesGetDistinctLabelledProcesses) {
  const Timeline predicted = two_workers("simulated");
  const Timeline measured = two_workers("measured");
  const json trace = json::parse(chrome_trace_json({&predicted, &measured}));
  std::map<int, std::string> process_names;
  for (const json& m : of_phase(trace, "M")) {
    if (m.at("name") == "process_name") process_names[m.at("pid")] = m.at("args").at("name");
  }
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "simulated wfbp worker 0"},
                                                        {1, "simulated wfbp worker 1"},
                                                        {2, "measured wfbp worker 0"},
                                                        {3, "measured wfbp worker 1"}}));
  std::set<int> pids;
  for (const json& e : of_phase(trace, "X")) pids.insert(e.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
}

// Three workers start each collective at different times; the k-th event of a name
// in an iteration is one collective, and one that a single worker recorded is no
// evidence of skew.
TEST(CollectiveSkew, IsTheMedianSpreadOfTheWorkersStartsOfOneCollective) {
  auto message = [](int worker, int iteration, Seconds start) {
    return Event{.worker = worker, .lane = "comm", .name = "allreduce 4KiB (1 ops)", .start = start,
                 .end = start + 0.5, .iteration = iteration};
  };
  const std::vector<Event> collectives = {
      // iteration 1, two messages of one name: spreads 0.2 and 0.4
      message(0, 1, 10.0), message(1, 1, 10.1), message(2, 1, 10.2),
      message(0, 1, 11.0), message(2, 1, 11.4), message(1, 1, 11.1),
      // iteration 2: spread 0.3
      message(1, 2, 20.3), message(0, 2, 20.0), message(2, 2, 20.1),
      // iteration 3, only worker 0: no spread
      message(0, 3, 30.0)};
  EXPECT_NEAR(collective_skew(collectives), 0.3, 1e-12);
  EXPECT_EQ(collective_skew({message(0, 1, 1.0), message(0, 2, 2.0)}), 0);
  EXPECT_EQ(collective_skew({}), 0);
}

TEST(SummaryJson, HasTheDocumentedKeys) {
  Summary s{.iteration = 2, .compute = 1.5, .exposed_comm = 0.5, .link_utilisation = 0.75,
            .iterations = 10, .peak_server_incast = 0, .server_busy = 0};
  json j = json::parse(summary_json(s));
  EXPECT_EQ(j.at("iteration_s"), 2.0);
  EXPECT_EQ(j.at("compute_s"), 1.5);
  EXPECT_EQ(j.at("exposed_comm_s"), 0.5);
  EXPECT_EQ(j.at("link_utilisation"), 0.75);
  EXPECT_EQ(j.at("iterations"), 10);
  EXPECT_FALSE(j.contains("peak_server_incast"));

  s.peak_server_incast = 8;
  s.server_busy = 0.25;
  j = json::parse(summary_json(s));
  EXPECT_EQ(j.at("peak_server_incast"), 8);
  EXPECT_EQ(j.at("server_busy"), 0.25);
  EXPECT_FALSE(j.contains("collective_skew_s"));

  s.collective_skew = 0.004;
  EXPECT_EQ(json::parse(summary_json(s)).at("collective_skew_s"), 0.004);
}

}  // namespace
}  // namespace weft
