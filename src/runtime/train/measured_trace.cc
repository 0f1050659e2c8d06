#include "runtime/train/measured_trace.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/comm/parameter_server.h"
#include "units/files.h"

namespace weft::runtime {
namespace {

using json = nlohmann::json;

json events_json(const std::vector<Event>& events) {
  json out = json::array();
  for (const Event& e : events) {
    out.push_back({{"lane", e.lane}, {"name", e.name}, {"start", e.start}, {"end", e.end},
                   {"iteration", e.iteration}, {"layer", e.layer}, {"bytes", e.bytes}});
  }
  return out;
}

std::vector<Event> events_from(const json& array, int worker) {
  std::vector<Event> out;
  for (const json& e : array) {
    out.push_back({.worker = worker, .lane = e["lane"], .name = e["name"], .start = e["start"], .end = e["end"],
                   .iteration = e["iteration"], .layer = e["layer"], .bytes = e["bytes"]});
  }
  return out;
}

// Busy time of the union of `intervals` clipped to [from, to], and the most that
// overlap at one instant.
std::pair<Seconds, int> busy_and_peak(std::vector<std::pair<Seconds, Seconds>> intervals, Seconds from, Seconds to) {
  std::sort(intervals.begin(), intervals.end());
  Seconds busy = 0, covered_until = from;
  std::vector<std::pair<Seconds, int>> edges;
  for (auto [start, end] : intervals) {
    if (end <= from || start >= to) continue;
    edges.push_back({start, +1});
    edges.push_back({end, -1});
    start = std::max(start, covered_until);
    end = std::min(end, to);
    if (end > start) {
      busy += end - start;
      covered_until = end;
    }
  }
  std::sort(edges.begin(), edges.end());  // at equal times, ends (−1) first
  int open = 0, peak = 0;
  for (const auto& [time, change] : edges) peak = std::max(peak, open += change);
  return {busy, peak};
}

}  // namespace

// A server's exchange events are named kExchangeEventPrefix and the server.
Summary summarise_measured(const std::vector<Event>& events, std::int64_t first, int iterations) {
  Summary s;
  if (iterations < 2) return s;
  const auto index = [&](const Event& e) { return e.iteration - first; };  // within the recorded ones
  std::vector<Seconds> begin(static_cast<size_t>(iterations), 1e300), compute(static_cast<size_t>(iterations), 0);
  std::vector<std::pair<Seconds, Seconds>> comm;
  std::map<int, std::vector<std::pair<Seconds, Seconds>>> exchanges;  // server -> intervals
  std::vector<Event> collectives;  // every worker's, past the warm-up
  for (const Event& e : events) {
    const std::int64_t t = index(e);
    if (t < 0 || t >= iterations) continue;
    if (e.lane == "comm") {
      if (e.name.starts_with(kExchangeEventPrefix)) {
        exchanges[std::atoi(e.name.c_str() + kExchangeEventPrefix.size())].emplace_back(e.start, e.end);
      } else if (t >= 1) {
        collectives.push_back(e);
      }
    }
    if (e.worker != 0) continue;
    if (e.lane == "compute") {
      begin[static_cast<size_t>(t)] = std::min(begin[static_cast<size_t>(t)], e.start);
      compute[static_cast<size_t>(t)] += e.end - e.start;
    } else if (e.lane == "comm") {
      comm.emplace_back(e.start, e.end);
    }
  }
  // Iteration t (t >= 1) lasts from its first forward to the next one's.
  const int measured = iterations - 2;
  if (measured < 1) return s;
  const Seconds span = begin[static_cast<size_t>(iterations - 1)] - begin[1];
  s.iterations = measured;
  s.iteration = span / measured;
  for (int t = 1; t < iterations - 1; ++t) s.compute += compute[static_cast<size_t>(t)];
  s.compute /= measured;
  s.exposed_comm = s.iteration - s.compute;
  const Seconds end = begin[static_cast<size_t>(iterations - 1)];
  s.link_utilisation = span > 0 ? busy_and_peak(comm, begin[1], end).first / span : 0;
  s.collective_skew = collective_skew(collectives);
  for (const auto& [server, intervals] : exchanges) {
    const auto [busy, peak] = busy_and_peak(intervals, begin[1], end);
    s.peak_server_incast = std::max(s.peak_server_incast, peak);
    if (span > 0) s.server_busy = std::max(s.server_busy, busy / span);
  }
  return s;
}

std::optional<Summary> write_measured_trace(const Group& group, int ranks, int workers, const std::string& strategy,
                                            Recorder& recorder, std::int64_t trained, std::string_view flag,
                                            const std::filesystem::path& file, const Timeline* predicted) {
  const auto key = [](int r) { return "weft/timeline/" + std::to_string(r); };
  const std::string mine = events_json(recorder.take()).dump();
  group.store->set(key(group.rank), std::vector<std::uint8_t>(mine.begin(), mine.end()));
  if (group.rank != 0) return std::nullopt;
  Timeline timeline{.source = "measured", .strategy = strategy};
  for (int r = 0; r < ranks; ++r) {
    timeline.process_names.push_back(r < workers ? fmt::format("rank {}", r)
                                                 : fmt::format("server {} (rank {})", r - workers, r));
    const std::vector<std::uint8_t> theirs = group.store->get(key(r));
    auto events = events_from(json::parse(std::string(theirs.begin(), theirs.end())), r);
    timeline.events.insert(timeline.events.end(), events.begin(), events.end());
  }
  timeline.summary = summarise_measured(
      timeline.events, recorder.first(),
      static_cast<int>(std::clamp<std::int64_t>(trained - recorder.first(), 0, recorder.iterations())));
  std::vector<const Timeline*> timelines{&timeline};
  if (predicted != nullptr) timelines.push_back(predicted);
  write_output(flag, file, chrome_trace_json(timelines));
  return timeline.summary;
}

std::string summary_json(const Summary& measured, const Summary& predicted) {
  json j = json::parse(weft::summary_json(measured));
  j["predicted_iteration_s"] = predicted.iteration;
  return j.dump();
}

}  // namespace weft::runtime
