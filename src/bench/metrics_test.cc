#include "bench/metrics.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weft::bench {
namespace {

using nlohmann::json;

json iteration_json(const IterationLine& l) {
  json j = {{"rank", l.rank}, {"iter", l.iter}, {"time_s", l.time}, {"iteration_s", l.iteration},
            {"loss", l.loss}, {"strategy", l.strategy}};
  if (l.compute) j["compute_s"] = *l.compute;
  return j;
}

json eval_json(const EvalLine& e) {
  return {
      {"rank", e.rank}, {"iter", e.iter}, {"time_s", e.time}, {"eval", {{"accuracy", e.accuracy}, {"loss", e.loss}}}};
}

TEST(Metrics, ParsesWhatTheTrainerWritesInAnyMixAndOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 10);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<IterationLine> iterations;
    std::vector<EvalLine> evals;
    std::string text;
    const int lines = static_cast<int>(rng() % 40);
    for (int i = 0; i < lines; ++i) {
      if (rng() % 4 == 0) {
        evals.push_back({.rank = 0, .iter = i, .time = u(rng), .accuracy = u(rng) / 10, .loss = u(rng)});
        text += eval_json(evals.back()).dump();
      } else {
        iterations.push_back({.rank = static_cast<int>(rng() % 4), .iter = i, .time = u(rng), .iteration = u(rng),
                              .loss = u(rng) - 5, .strategy = rng() % 2 ? "dcredit" : "pytorch-ddp"});
        if (rng() % 2 == 0) iterations.back().compute = u(rng);  // weft train's lines have it
        json j = iteration_json(iterations.back());
        j["extra"] = {1, 2};  // unknown fields are ignored
        text += j.dump();
      }
      text += rng() % 5 == 0 ? "\n\n" : "\n";
    }
    const Metrics m = parse_metrics(text, "m.jsonl");
    ASSERT_EQ(m.iterations.size(), iterations.size());
    ASSERT_EQ(m.evals.size(), evals.size());
    for (std::size_t i = 0; i < iterations.size(); ++i) {
      EXPECT_EQ(m.iterations[i].rank, iterations[i].rank);
      EXPECT_EQ(m.iterations[i].iter, iterations[i].iter);
      EXPECT_DOUBLE_EQ(m.iterations[i].time, iterations[i].time);
      EXPECT_DOUBLE_EQ(m.iterations[i].iteration, iterations[i].iteration);
      EXPECT_EQ(m.iterations[i].compute, iterations[i].compute);
      EXPECT_DOUBLE_EQ(m.iterations[i].loss, iterations[i].loss);
      EXPECT_EQ(m.iterations[i].strategy, iterations[i].strategy);
    }
    for (std::size_t i = 0; i < evals.size(); ++i) {
      EXPECT_EQ(m.evals[i].iter, evals[i].iter);
      EXPECT_DOUBLE_EQ(m.evals[i].accuracy, evals[i].accuracy);
      EXPECT_DOUBLE_EQ(m.evals[i].time, evals[i].time);
    }
  }
}

// Every required field, removed or mistyped, is an error naming the file, the line
// and the field.
TEST(Metrics, AMissingOrMistypedFieldNamesFileLineAndField) {
  const json iteration =
      iteration_json({.rank = 1, .iter = 3, .time = 1.5, .iteration = 0.1, .loss = 2, .strategy = "wfbp"});
  const json eval = eval_json({.rank = 0, .iter = 3, .time = 2, .accuracy = 0.8, .loss = 0.5});
  const std::string first = iteration.dump() + "\n";
  for (const json& line : {iteration, eval}) {
    for (const auto& [key, value] : line.items()) {
      json broken = line;
      broken.erase(key);
      try {
        parse_metrics(first + broken.dump() + "\n", "run.jsonl");
        if (key == "eval") continue;  // without "eval" it is an iteration line, and lacks iteration_s
        ADD_FAILURE() << "no error without " << key;
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("run.jsonl:2"), std::string::npos) << e.what();
        if (key != "eval") {
          EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
      }
      broken[key] = "text";
      if (key == "strategy") broken[key] = 3;
      EXPECT_THROW(parse_metrics(first + broken.dump(), "run.jsonl"), UsageError) << key;
    }
  }
  json accuracy = eval;
  accuracy["eval"].erase("accuracy");
  try {
    parse_metrics(accuracy.dump(), "run.jsonl");
    ADD_FAILURE() << "no error without eval.accuracy";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.accuracy"), std::string::npos) << e.what();
  }
}

// Local SGD and parameter servers evaluate rank 0's own model and the one the
// workers agree on ("eval_agreed"); the race and its plots follow the agreed one.
TEST(Metrics, AnEvaluationOfTheAgreedModelIsTheOneRead) {
  json line = eval_json({.rank = 0, .iter = 49, .time = 3, .accuracy = 0.81, .loss = 0.6});
  EXPECT_FALSE(parse_metrics(line.dump(), "m").evals.at(0).own_accuracy);
  line["eval_agreed"] = {{"accuracy", 0.84}, {"loss", 0.5}};
  const EvalLine read = parse_metrics(line.dump(), "m").evals.at(0);
  EXPECT_DOUBLE_EQ(read.accuracy, 0.84);
  EXPECT_DOUBLE_EQ(read.loss, 0.5);
  EXPECT_DOUBLE_EQ(read.own_accuracy.value_or(-1), 0.81);
  line["eval_agreed"].erase("accuracy");
  EXPECT_NE(test_support::usage_error_of([&] { parse_metrics(line.dump(), "m.jsonl"); }).find("eval_agreed.accuracy"),
            std::string::npos);
}

TEST(Metrics, RejectsNegativeTimesAndNonObjects) {
  json line = iteration_json({.rank = 0, .iter = 0, .time = 1, .iteration = -0.1, .loss = 1, .strategy = "s"});
  EXPECT_THROW(parse_metrics(line.dump(), "m"), UsageError);
  line["iteration_s"] = 0.1;
  line["compute_s"] = -0.1;
  EXPECT_THROW(parse_metrics(line.dump(), "m"), UsageError);
  line["compute_s"] = "fast";
  EXPECT_THROW(parse_metrics(line.dump(), "m"), UsageError);
  line["compute_s"] = 0.05;
  EXPECT_DOUBLE_EQ(parse_metrics(line.dump(), "m").iterations.at(0).compute.value(), 0.05);
  line["rank"] = -1;
  EXPECT_EQ(test_support::usage_error_of([&] { parse_metrics(line.dump(), "m.jsonl"); }),
            "m.jsonl:1: rank is -1, expected an integer in [0, 65536]");
  EXPECT_THROW(parse_metrics("[1, 2]", "m"), UsageError);
  EXPECT_THROW(parse_metrics("{\"rank\": 0,", "m"), UsageError);
}

TEST(MetricsTail, ReadsOnlyCompleteLinesAndContinuesWhereItStopped) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("weft_metrics_tail_" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(file);
  MetricsTail tail(file);
  EXPECT_TRUE(tail.poll().iterations.empty());  // no file yet: nothing
  const std::string a =
      iteration_json({.rank = 0, .iter = 0, .time = 1, .iteration = 1, .loss = 1, .strategy = "s"}).dump();
  const std::string b = eval_json({.rank = 0, .iter = 0, .time = 2, .accuracy = 0.9, .loss = 1}).dump();
  std::ofstream out(file);
  out << a << "\n" << b.substr(0, 10) << std::flush;
  Metrics m = tail.poll();
  EXPECT_EQ(m.iterations.size(), 1u);
  EXPECT_TRUE(m.evals.empty());  // the half-written line waits
  out << b.substr(10) << "\n{broken\n" << std::flush;
  try {
    tail.poll();
    ADD_FAILURE() << "no error for the broken third line";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(file);
}

TEST(MetricsTail, DeliversEveryLineExactlyOnceWhateverThePollingRhythm) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("weft_metrics_rhythm_" + std::to_string(::getpid()) + ".jsonl");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::filesystem::remove(file);
    std::string text;
    const int lines = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < lines; ++i) {
      const IterationLine line{
          .rank = 0, .iter = i, .time = static_cast<double>(i), .iteration = 1, .loss = 0, .strategy = "s"};
      text += iteration_json(line).dump() + "\n";
    }
    MetricsTail tail(file);
    std::ofstream out(file);
    std::vector<std::int64_t> seen;
    for (std::size_t written = 0; written < text.size();) {
      const std::size_t n = std::min<std::size_t>(text.size() - written, 1 + rng() % 150);
      out << text.substr(written, n) << std::flush;
      written += n;
      for (const IterationLine& l : tail.poll().iterations) seen.push_back(l.iter);
    }
    ASSERT_EQ(static_cast<int>(seen.size()), lines);
    for (int i = 0; i < lines; ++i) EXPECT_EQ(seen[i], i);
  }
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace weft::bench
