#include "schedule/schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "profile/profile.h"
#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft {

std::string_view to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kAverageGradients: return "average-gradients";
    case OpKind::kAverageParameters: return "average-parameters";
    case OpKind::kParameterServer: return "parameter-server";
  }
  return "?";
}

std::string_view to_string(DispatchPolicy::Kind kind) {
  switch (kind) {
    case DispatchPolicy::Kind::kInOrder: return "in-order";
    case DispatchPolicy::Kind::kCredit: return "credit";
    case DispatchPolicy::Kind::kWindows: return "windows";
  }
  return "?";
}

Bytes CommOp::bytes() const {
  Bytes total = 0;
  for (const Chunk& c : chunks) total += c.length;
  return total;
}

namespace {

[[noreturn]] void broken(const Schedule& s, int iteration, int op, const std::string& what) {
  throw std::logic_error(
      fmt::format("schedule '{}': iteration {}, op {}: {}", s.strategy, iteration, op, what));
}

// One encoding for the whole schedule (so that any fusion of its operations is one
// message of one codec) but for its site averages, which are exact (Note [Sites in
// a schedule]); element-wise where servers exchange (Note [Compressed
// exchanges] in runtime/comm/parameter_server.h), a rank only for PowerSGD.
void check_encoding(const Schedule& s, int iteration, int index) {
  const CommOp& op = s.iterations[static_cast<size_t>(iteration)][static_cast<size_t>(index)];
  if (op.reach == Reach::kSite) {
    if (op.encoding != Encoding{}) {
      broken(s, iteration, index, fmt::format("a site average encoded {}: site averages are exact (none)",
                                              to_string(op.encoding)));
    }
    return;
  }
  const Encoding first = [&] {
    for (const auto& ops : s.iterations) {
      for (const CommOp& other : ops) {
        if (other.reach != Reach::kSite) return other.encoding;
      }
    }
    return op.encoding;
  }();
  if (op.encoding != first) {
    broken(s, iteration, index, fmt::format("encoding {} differs from the first operation's {}",
                                            to_string(op.encoding), to_string(first)));
  }
  if (low_rank(op.encoding) && op.kind == OpKind::kParameterServer) {
    broken(s, iteration, index, fmt::format("{} operation encoded {}: parameter-server exchanges take none, fp16, "
                                            "bf16 or int8",
                                            to_string(op.kind), to_string(op.encoding)));
  }
  if (low_rank(op.encoding) != (op.encoding.rank >= 1) || op.encoding.rank < 0) {
    broken(s, iteration, index, fmt::format("encoding {} with rank {}", to_string(op.encoding), op.encoding.rank));
  }
}

// Note [Sites in a schedule]: sites reach averages only, and a policy that fuses
// by timing fuses operations of one reach.
void check_reach(const Schedule& s, int iteration, int index) {
  const CommOp& op = s.iterations[static_cast<size_t>(iteration)][static_cast<size_t>(index)];
  if (op.reach != Reach::kAll && op.kind == OpKind::kParameterServer) {
    broken(s, iteration, index, fmt::format("{} operation with reach {}: only averages reach by sites",
                                            to_string(op.kind), to_string(op.reach)));
  }
  const Reach first = s.iterations.front().empty() ? op.reach : s.iterations.front().front().reach;
  if (decided_by_timing(s.dispatch) && op.reach != first) {
    broken(s, iteration, index, fmt::format("reach {} differs from the first operation's {} under dispatch {}",
                                            to_string(op.reach), to_string(first), to_string(s.dispatch.kind)));
  }
}

// Byte ranges of one layer, sorted, to find overlaps and gaps.
using Ranges = std::vector<std::pair<Bytes, Bytes>>;

// Sorts `ranges` and checks they do not overlap; returns the bytes covered.
Bytes merge_disjoint(const Schedule& s, int iteration, int layer, Ranges& ranges) {
  std::sort(ranges.begin(), ranges.end());
  Bytes covered = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (i > 0 && ranges[i].first < ranges[i - 1].second) {
      broken(s, iteration, -1,
             fmt::format("layer {}: bytes [{}, {}) sent twice in one iteration", layer,
                         ranges[i].first, std::min(ranges[i].second, ranges[i - 1].second)));
    }
    covered += ranges[i].second - ranges[i].first;
  }
  return covered;
}

}  // namespace

void validate(const Schedule& s, const Profile& profile, int workers) {
  if (s.period < 1 || static_cast<int>(s.iterations.size()) != s.period) {
    throw std::logic_error(fmt::format("schedule '{}': period {} but {} iterations", s.strategy,
                                       s.period, s.iterations.size()));
  }
  if (s.dispatch.kind == DispatchPolicy::Kind::kCredit && s.dispatch.credit <= 0) {
    throw std::logic_error(fmt::format("schedule '{}': credit {} must be > 0", s.strategy,
                                       s.dispatch.credit));
  }
  if (s.dispatch.credit < 0) {
    throw std::logic_error(fmt::format("schedule '{}': credit {} must be >= 0", s.strategy, s.dispatch.credit));
  }
  // Elastic averaging (docs/limits.md): alpha pulls a worker part of the way to
  // the centre and beta moves the centre part of the way: both fractions.
  if (!(s.easgd.alpha >= 0 && s.easgd.alpha <= 1 && s.easgd.beta >= 0 && s.easgd.beta <= 1)) {
    throw std::logic_error(fmt::format("schedule '{}': easgd alpha {} and beta {} must be in [0, 1]", s.strategy,
                                       s.easgd.alpha, s.easgd.beta));
  }
  for (Bytes w : s.dispatch.windows) {
    if (w <= 0) {
      throw std::logic_error(fmt::format("schedule '{}': window of {} bytes must be > 0", s.strategy, w));
    }
  }
  const int layers = profile.size();
  // Bytes of each layer covered over the whole period (for parameter/PS schedules).
  std::vector<Bytes> covered_in_period(static_cast<size_t>(layers), 0);
  bool gradients = false;
  for (int it = 0; it < s.period; ++it) {
    std::map<int, Ranges> ranges;
    std::map<int, Bytes> pulled;  // layer -> bytes a plain parameter server sends back this iteration
    const auto& ops = s.iterations[static_cast<size_t>(it)];
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const CommOp& op = ops[static_cast<size_t>(i)];
      gradients = gradients || op.kind == OpKind::kAverageGradients;
      if (op.chunks.empty()) broken(s, it, i, "has no chunks");
      check_encoding(s, it, i);
      check_reach(s, it, i);
      if (op.ready_after < 0 || op.ready_after >= layers) {
        broken(s, it, i, fmt::format("ready_after {} is not a layer (0..{})", op.ready_after, layers - 1));
      }
      if (op.needed_by != kBarrier && (op.needed_by < 0 || op.needed_by >= layers)) {
        broken(s, it, i, fmt::format("needed_by {} is not a layer or kBarrier", op.needed_by));
      }
      if (!op.release_offset.empty()) {
        if (static_cast<int>(op.release_offset.size()) != workers) {
          broken(s, it, i, fmt::format("{} release offsets for {} workers", op.release_offset.size(), workers));
        }
        for (Seconds r : op.release_offset) {
          if (!(r >= 0 && r <= limits::kMaxSeconds)) {
            broken(s, it, i, fmt::format("release offset {} s outside [0, {}] s", r, limits::kMaxSeconds));
          }
        }
        // Collectives match by launch order: under a policy decided by timing, an
        // offset that differs by worker would fuse different ops into a rank's k-th.
        const bool collective = op.kind != OpKind::kParameterServer;
        if (collective && decided_by_timing(s.dispatch) &&
            std::ranges::any_of(op.release_offset, [&](Seconds r) { return r != op.release_offset[0]; })) {
          broken(s, it, i, fmt::format("release offsets differ between workers on a collective under the {} "
                                       "policy; give every worker the same offset, or dispatch in order",
                                       to_string(s.dispatch.kind)));
        }
      }
      for (const Chunk& c : op.chunks) {
        if (c.layer < 0 || c.layer >= layers) {
          broken(s, it, i, fmt::format("chunk of layer {} (model has {} layers)", c.layer, layers));
        }
        const Bytes size = profile.layers[static_cast<size_t>(c.layer)].bytes();
        if (c.offset < 0 || c.length <= 0 || c.offset + c.length > size) {
          broken(s, it, i, fmt::format("chunk [{}, {}) outside layer {} of {} bytes", c.offset,
                                       c.offset + c.length, c.layer, size));
        }
        // Backward runs L-1..0, so the data of layer c exists once layer c is done;
        // the op may leave only after its smallest layer.
        if (op.ready_after > c.layer) {
          broken(s, it, i, fmt::format("ready after layer {} but carries layer {}, whose backward ends later",
                                       op.ready_after, c.layer));
        }
        ranges[c.layer].emplace_back(c.offset, c.offset + c.length);
        if (op.kind == OpKind::kParameterServer && s.easgd.beta == 0) pulled[c.layer] += c.length;
      }
    }
    for (auto& [layer, r] : ranges) {
      covered_in_period[static_cast<size_t>(layer)] += merge_disjoint(s, it, layer, r);
    }
    // Without EASGD the server steps a layer and the worker takes its parameters
    // whole, so an iteration exchanges all of a layer or none of it.
    for (auto [layer, bytes] : pulled) {
      const Bytes size = profile.layers[static_cast<size_t>(layer)].bytes();
      if (bytes != size) {
        broken(s, it, -1, fmt::format("a parameter server without EASGD exchanges {} of layer {}'s {} bytes; "
                                      "expected all of them or none",
                                      bytes, layer, size));
      }
    }
    if (gradients) {
      for (int l = 0; l < layers; ++l) {
        const Bytes size = profile.layers[static_cast<size_t>(l)].bytes();
        const auto found = ranges.find(l);
        Bytes got = 0;
        if (found != ranges.end()) {
          for (auto [a, b] : found->second) got += b - a;
        }
        if (got != size) {
          broken(s, it, -1, fmt::format("gradients of layer {} cover {} of its {} bytes", l, got, size));
        }
      }
    }
  }
  if (!gradients) {
    for (int l = 0; l < layers; ++l) {
      const Bytes size = profile.layers[static_cast<size_t>(l)].bytes();
      if (size > 0 && covered_in_period[static_cast<size_t>(l)] < size) {
        broken(s, -1, -1, fmt::format("layer {} is never synchronised in the period", l));
      }
    }
  }
}

std::string to_json(const Schedule& s) {
  nlohmann::json j;
  j["strategy"] = s.strategy;
  j["period"] = s.period;
  j["dispatch"] = {{"policy", to_string(s.dispatch.kind)},
                   {"credit_B", s.dispatch.credit},
                   {"windows_B", s.dispatch.windows}};
  j["easgd"] = {{"alpha", s.easgd.alpha}, {"beta", s.easgd.beta}};
  j["options"] = nlohmann::json::parse(s.options_json.empty() ? "{}" : s.options_json);
  auto& iterations = j["iterations"] = nlohmann::json::array();
  for (const auto& ops : s.iterations) {
    auto list = nlohmann::json::array();
    for (const CommOp& op : ops) {
      auto chunks = nlohmann::json::array();
      for (const Chunk& c : op.chunks) chunks.push_back({c.layer, c.offset, c.length});
      list.push_back({{"kind", to_string(op.kind)},
                      {"chunks", chunks},
                      {"ready_after", op.ready_after},
                      {"release_offset_s", op.release_offset},
                      {"priority", op.priority},
                      {"needed_by", op.needed_by},
                      {"server", op.server}});
      // Written only when compressed: an uncompressed schedule's JSON is as before.
      if (lossy(op.encoding)) list.back()["encoding"] = to_string(op.encoding);
      if (op.reach != Reach::kAll) list.back()["reach"] = to_string(op.reach);  // likewise
    }
    iterations.push_back(std::move(list));
  }
  return j.dump(1);
}

namespace {

constexpr std::string_view kWhat = "a schedule from `weft simulate --schedule-out`";

template <typename Kind, std::size_t N>
Kind kind_named(const JsonReader& r, const std::string& field, const std::array<Kind, N>& kinds) {
  const std::string name = r.string(field);
  std::string accepted;
  for (const Kind k : kinds) {
    if (name == to_string(k)) return k;
    accepted += fmt::format("{}\"{}\"", accepted.empty() ? "" : " or ", to_string(k));
  }
  r.reject(field, accepted, name);
}

CommOp read_op(const JsonReader& r) {
  // Indices as ints, within the limits any schedule meets (docs/limits.md);
  // validate() checks them against the model and cluster.
  constexpr std::int64_t kInt = std::numeric_limits<int>::max();
  CommOp op{.kind = kind_named(r, "kind", std::array{OpKind::kAverageGradients, OpKind::kAverageParameters,
                                                     OpKind::kParameterServer}),
            .ready_after = static_cast<int>(r.integer("ready_after", 0, limits::kMaxLayers)),
            .release_offset = r.numbers("release_offset_s"),
            .priority = static_cast<int>(r.integer("priority", -kInt, kInt)),
            .needed_by = static_cast<int>(r.integer("needed_by", kBarrier, limits::kMaxLayers)),
            .server = static_cast<int>(r.integer("server", 0, limits::kMaxServers))};
  if (r.has("encoding")) op.encoding = parse_encoding(r.string("encoding"), fmt::format("{}: encoding", kWhat));
  if (r.has("reach")) op.reach = kind_named(r, "reach", std::array{Reach::kAll, Reach::kSite, Reach::kBySites});
  const nlohmann::json& chunks = r.array("chunks");
  for (const nlohmann::json& c : chunks) {
    const auto within = [](const nlohmann::json& x, std::int64_t max) {
      return x.is_number_integer() && x.get<std::int64_t>() >= 0 && x.get<std::int64_t>() <= max;
    };
    const bool triple = c.is_array() && c.size() == 3 && within(c[0], limits::kMaxLayers) &&
                        within(c[1], limits::kMaxBytes) && within(c[2], limits::kMaxBytes);
    if (!triple) {
      r.reject("chunks", fmt::format("an array of [layer, offset, length] integer triples, each in [0, {}]",
                                     limits::kMaxBytes),
               chunks);
    }
    op.chunks.push_back({.layer = c[0].get<int>(), .offset = c[1].get<Bytes>(), .length = c[2].get<Bytes>()});
  }
  return op;
}

}  // namespace

Schedule parse_schedule(std::string_view json_text, std::string_view origin) {
  const nlohmann::json document = parse_json(json_text, origin, kWhat);
  const JsonReader top(document, "", origin, kWhat);
  const JsonReader dispatch = top.child("dispatch");
  const JsonReader easgd = top.child("easgd");
  top.child("options");  // an object, or it says so
  Schedule s{.strategy = top.string("strategy"),
             .period = static_cast<int>(top.integer("period", 1, limits::kMaxPeriod)),
             .dispatch = {.kind = kind_named(dispatch, "policy",
                                             std::array{DispatchPolicy::Kind::kInOrder, DispatchPolicy::Kind::kCredit,
                                                        DispatchPolicy::Kind::kWindows}),
                          .credit = dispatch.integer("credit_B", 0, limits::kMaxBytes),
                          .windows = dispatch.integers("windows_B")},
             .easgd = {.alpha = easgd.number("alpha"), .beta = easgd.number("beta")},
             .options_json = top.get("options").dump()};
  const nlohmann::json& iterations = top.array("iterations");
  for (std::size_t i = 0; i < iterations.size(); ++i) {
    const std::string path = top.element("iterations", i);
    if (!iterations[i].is_array()) top.reject(path, "an array of operations", iterations[i]);
    auto& ops = s.iterations.emplace_back();
    for (std::size_t k = 0; k < iterations[i].size(); ++k) {
      ops.push_back(read_op(JsonReader(iterations[i][k], fmt::format("{}[{}]", path, k), origin, kWhat)));
    }
  }
  return s;
}

Schedule load_schedule(const std::filesystem::path& file) {
  return parse_schedule(read_input(file, "the schedule (JSON from `weft simulate --schedule-out`)"), file.string());
}

}  // namespace weft
