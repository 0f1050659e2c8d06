// The Schedule: weft's shared intermediate representation (docs/design.md §1.3).
//
// A scheduler is a pure function (profile, cluster, options) -> Schedule. The
// simulator and the runtime both execute a Schedule and nothing else; neither
// knows which strategy produced it. See Note [One schedule, two executors].
//
// Note [One schedule, two executors]
// ----------------------------------
// Everything a strategy decides is in this data: which bytes travel together
// (chunks of an operation), when they may leave (ready + release offset), in what
// order (priority, dispatch policy) and who waits for them (needed_by). The
// dispatch policy is interpreted by one class, Dispatcher (schedule/dispatcher.h),
// which both executors drive with their own clock: simulated events or real
// completions. A strategy that needs behaviour not expressible here extends this
// IR; it never adds a branch to an executor.
//
// Layers are 0-based in forward order (docs/strategies.md's layer l is index l-1).
//
// Thread-safety: plain data.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cost/topology.h"
#include "schedule/encoding.h"
#include "units/units.h"

namespace weft {

struct Profile;

// A contiguous byte range of one layer's parameters (or gradients).
struct Chunk {
  int layer = 0;
  Bytes offset = 0;
  Bytes length = 0;
};

enum class OpKind {
  kAverageGradients,   // all-reduce (mean) of gradients, then the optimizer step
  kAverageParameters,  // local optimizer step first, then all-reduce (mean) of parameters
  kParameterServer,    // push to the server, server update (EASGD), pull
};
std::string_view to_string(OpKind kind);

// Note [Sites in a schedule]
// --------------------------
// Rule: an averaging operation says which workers it averages (Reach); every
// other decision (order, fusion, release) is made as for any operation. kBySites
// gives every worker the same mean as kAll, by other collectives: a site's sum
// crosses the WAN once, between its leader (its lowest rank) and the other
// sites' leaders, instead of once per ring step. kSite averages inside each site
// only: the cheap averages of hierarchical local SGD between the plan's averages
// across sites (docs/strategies.md, "Sites"), exact because inside a site the
// link is not what costs; a codec and an outer optimizer act on the averages
// across sites only. Invariant: operations fused into one message share their
// reach (decided_by_timing policies carry one reach for the whole schedule).
// Why in the IR: the simulator prices each reach on the links it crosses
// (cost/cluster.h) and the engine runs it on the site's or leaders' Gloo group;
// a strategy chooses, neither executor does.

// needed_by value meaning "before the first forward of the next iteration".
inline constexpr int kBarrier = -1;

// One communication operation: the unit the dispatcher sends (possibly fused with
// others into one message by the window policy).
struct CommOp {
  std::vector<Chunk> chunks;      // what; fused into one flat buffer in this order
  OpKind kind = OpKind::kAverageGradients;
  int ready_after = 0;            // layer whose backward (this iteration) produces the data
  std::vector<Seconds> release_offset;  // per worker delay after ready; empty = all 0
  int priority = 0;               // smaller is sent first (credit and window policies)
  int needed_by = kBarrier;       // layer whose forward in the next iteration waits
  int server = 0;                 // parameter server holding these chunks (kParameterServer)
  Encoding encoding;              // how its values travel (schedule/encoding.h); operations
                                  // fused into one message share one
  Reach reach = Reach::kAll;      // which workers it averages (Note [Sites in a schedule])

  Bytes bytes() const;
  Seconds release(int worker) const {
    return release_offset.empty() ? 0.0 : release_offset[static_cast<size_t>(worker)];
  }
};

struct DispatchPolicy {
  enum class Kind {
    kInOrder,  // one message at a time, operations in list order (across iterations too)
    kCredit,   // ready ops by priority; start while bytes in flight + op <= credit
               // (one op is always allowed when nothing is in flight)
    kWindows,  // one message at a time; message k of an iteration fuses its
               // highest-priority ready ops while they fit in windows[k] bytes
               // (at least one; every ready op past the sequence's end)
  };
  Kind kind = Kind::kInOrder;
  Bytes credit = 0;            // kCredit
  std::vector<Bytes> windows;  // kWindows: byte budgets (Note [Windows of bytes] in
                               // schedulers/dcredit.cc says why not op counts)
};
std::string_view to_string(DispatchPolicy::Kind kind);

// Whether which operations a message fuses depends on what is ready when a message
// completes, and so could differ from rank to rank: then rank 0 decides each
// collective and announces it (Note [Collective order] in runtime/comm/engine.h), and
// the others issue it only once the announcement has arrived.
inline bool decided_by_timing(const DispatchPolicy& policy) {
  return policy.kind != DispatchPolicy::Kind::kInOrder;
}

// EASGD coefficients for parameter-server schedules (docs/strategies.md §4.4). {0, 0} (beta = 0,
// a centre that never moves) means plain synchronous PS instead: workers push
// gradients, the server averages them and steps its optimizer, workers pull
// parameters (Note [What the server does] in schedulers/ps.h).
struct Easgd {
  double alpha = 0;  // elastic pull of a worker towards the centre
  double beta = 0;   // moving rate of the centre
};

struct Schedule {
  std::string strategy;
  int period = 1;
  // iterations[i] are the operations of iteration i of the period; global
  // iteration t uses iterations[t % period].
  std::vector<std::vector<CommOp>> iterations;
  DispatchPolicy dispatch;
  Easgd easgd;               // used by kParameterServer operations
  std::string options_json;  // a JSON object: what the strategy was run with ("{}" if none)

  const std::vector<CommOp>& ops(int global_iteration) const {
    return iterations[static_cast<size_t>(global_iteration % period)];
  }
};

// Checks the invariants every executor relies on; THROWS std::logic_error naming
// the iteration, operation and values that break them:
// - period >= 1 and iterations.size() == period;
// - every chunk lies inside its layer; no byte is sent twice in one iteration;
// - gradient schedules (kAverageGradients) cover every byte of every layer in every
//   iteration; parameter and PS schedules cover every byte at least once per period,
//   and a PS schedule without EASGD (beta = 0) all or none of a layer per iteration;
// - ready_after and needed_by name existing layers (needed_by may be kBarrier), and
//   an operation is ready only after the backward of every layer it carries
//   (ready_after <= min layer of its chunks, since backward runs L-1..0);
// - release offsets are empty or one per worker and >= 0, and the same on every
//   worker for a collective (not kParameterServer) when decided_by_timing(dispatch);
// - kWindows has windows > 0 bytes; kCredit has credit > 0;
// - every operation has the schedule's one encoding (docs/compression.md: any
//   kind's bytes may be encoded), a low-rank one (PowerSGD, ACP-SGD) with rank >= 1
//   and never on a parameter-server exchange; but a kSite operation, which is
//   never encoded;
// - a reach other than kAll only on averaging operations, and one reach for the
//   whole schedule when decided_by_timing(dispatch) (Note [Sites in a schedule]).
// Whether the cluster has the sites a reach needs is the executors' to check.
// Both executors run every schedule it accepts by one set of dependencies
// (schedule/index.h, Note [Dependencies of an operation]).
void validate(const Schedule& schedule, const Profile& profile, int workers);

// JSON (`weft simulate --schedule-out`), read back by parse_schedule: `weft
// simulate --schedule` executes a schedule as it was written, on whatever
// profile it is given (the bench predicts the schedule a run executed on the
// run's own compute this way).
std::string to_json(const Schedule& schedule);

// The schedule to_json wrote. THROWS UsageError naming `origin` and the field by
// its path (e.g. "iterations[0][2].chunks") for text that is not JSON, a missing
// or mistyped field, or an unknown kind or policy, saying what is accepted.
// Whether the schedule fits a model is validate()'s to say.
Schedule parse_schedule(std::string_view json_text, std::string_view origin);
Schedule load_schedule(const std::filesystem::path& file);

}  // namespace weft
