#include "timeline/timeline.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace weft {

namespace {

using nlohmann::json;

constexpr double kMicrosecondsPerSecond = 1e6;

json metadata(std::string_view what, int pid, int tid, json args) {
  json m = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

// Appends one timeline's processes and events, numbering its processes from
// `first_pid`; returns the number of pids it used.
int append_timeline(const Timeline& timeline, int first_pid, json& out) {
  int processes = static_cast<int>(timeline.process_names.size());
  for (const Event& e : timeline.events) processes = std::max(processes, e.worker + 1);

  // Lanes get the same tid in every process of a timeline, in order of first use, so
  // that "compute" sits above "comm" as the executor wrote them.
  std::unordered_map<std::string_view, int> tid_of;
  std::vector<std::string_view> lanes;
  std::vector<std::vector<bool>> used(static_cast<size_t>(processes));
  for (const Event& e : timeline.events) {
    auto [it, inserted] = tid_of.try_emplace(e.lane, static_cast<int>(lanes.size()) + 1);
    if (inserted) lanes.push_back(e.lane);
    auto& lanes_used = used[static_cast<size_t>(e.worker)];
    if (lanes_used.size() <= static_cast<size_t>(it->second)) lanes_used.resize(it->second + 1);
    lanes_used[static_cast<size_t>(it->second)] = true;
  }

  const std::string prefix =
      timeline.strategy.empty() ? timeline.source : timeline.source + " " + timeline.strategy;
  for (int p = 0; p < processes; ++p) {
    const int pid = first_pid + p;
    const std::string name = static_cast<size_t>(p) < timeline.process_names.size()
                                 ? timeline.process_names[static_cast<size_t>(p)]
                                 : fmt::format("worker {}", p);
    out.push_back(metadata("process_name", pid, -1, {{"name", prefix + " " + name}}));
    out.push_back(metadata("process_sort_index", pid, -1, {{"sort_index", pid}}));
    const auto& lanes_used = used[static_cast<size_t>(p)];
    for (size_t tid = 1; tid < lanes_used.size(); ++tid) {
      if (!lanes_used[tid]) continue;
      out.push_back(metadata("thread_name", pid, static_cast<int>(tid),
                             {{"name", std::string(lanes[tid - 1])}}));
      out.push_back(metadata("thread_sort_index", pid, static_cast<int>(tid),
                             {{"sort_index", tid}}));
    }
  }
  for (const Event& e : timeline.events) {
    if (e.worker < 0) {
      throw std::logic_error(fmt::format("timeline event '{}' has worker {}", e.name, e.worker));
    }
    out.push_back({{"name", e.name},
                   {"ph", "X"},
                   {"pid", first_pid + e.worker},
                   {"tid", tid_of.at(e.lane)},
                   {"ts", e.start * kMicrosecondsPerSecond},
                   {"dur", std::max(0.0, e.end - e.start) * kMicrosecondsPerSecond},
                   {"args", {{"iteration", e.iteration}, {"layer", e.layer}, {"bytes", e.bytes}}}});
  }
  return processes;
}


}  // namespace

std::string chrome_trace_json(const std::vector<const Timeline*>& timelines) {
  json events = json::array();
  int pid = 0;
  for (const Timeline* timeline : timelines) pid += append_timeline(*timeline, pid, events);
  const json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return trace.dump();
}

std::string summary_json(const Summary& s) {
  json j = {{"iteration_s", s.iteration},
            {"compute_s", s.compute},
            {"exposed_comm_s", s.exposed_comm},
            {"link_utilisation", s.link_utilisation},
            {"iterations", s.iterations}};
  // Only parameter-server runs have incast; all-reduce summaries leave the keys out.
  if (s.peak_server_incast > 0) {
    j["peak_server_incast"] = s.peak_server_incast;
    j["server_busy"] = s.server_busy;
  }
  if (s.slowed_compute > 0) j["slowed_compute_s"] = s.slowed_compute;
  if (s.collective_skew > 0) j["collective_skew_s"] = s.collective_skew;
  return j.dump();
}

Seconds collective_skew(const std::vector<Event>& collectives) {
  // (iteration, name, k) -> the earliest and latest start, and how many workers.
  struct Starts {
    Seconds first = 1e300, last = -1e300;
    int workers = 0;
  };
  std::map<std::tuple<int, std::string, int>, Starts> by_collective;
  std::map<std::tuple<int, int, std::string>, int> seen;  // (worker, iteration, name) -> events so far
  for (const Event& e : collectives) {
    const int k = seen[{e.worker, e.iteration, e.name}]++;
    Starts& s = by_collective[{e.iteration, e.name, k}];
    s.first = std::min(s.first, e.start);
    s.last = std::max(s.last, e.start);
    ++s.workers;
  }
  std::vector<double> spreads;
  for (const auto& [key, s] : by_collective) {
    if (s.workers >= 2) spreads.push_back(s.last - s.first);
  }
  return spreads.empty() ? 0 : median(spreads);
}

}  // namespace weft
