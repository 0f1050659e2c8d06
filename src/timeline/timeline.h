// Timeline: what an executor did, event by event, and its summary (docs/design.md §1.3).
//
// Both executors write this same structure: the simulator predicts it, the runtime
// measures it. It is written as Chrome trace JSON (opens in Perfetto and
// chrome://tracing): one process per worker (pid = worker, servers after workers),
// one thread per lane ("compute", "comm", a link's name, ...), complete ("X")
// events in microseconds, args {iteration, layer, bytes}.
//
// Thread-safety: plain data and pure functions.
#pragma once

#include <string>
#include <vector>

#include "units/units.h"

namespace weft {

struct Event {
  int worker = 0;        // a worker rank; servers are numbered after the workers
  std::string lane;      // "compute", "comm", "server", or a link name
  std::string name;      // "fp conv1", "bp conv1", "allreduce 3 ops", "push g2", ...
  Seconds start = 0;
  Seconds end = 0;
  int iteration = 0;
  int layer = -1;        // -1 when the event spans several layers
  Bytes bytes = 0;
};

struct Summary {
  Seconds iteration = 0;       // mean, over whole periods in steady state
  Seconds compute = 0;         // forward + backward (+ optimizer) of one iteration
  // Simulated: the same as the workers ran it, its layers slowed where they
  // overlapped communication (Note [Shared cores], sim/simulator.cc); equal to
  // compute where nothing slows them. 0 in a measured timeline.
  Seconds slowed_compute = 0;
  Seconds exposed_comm = 0;    // iteration − compute
  double link_utilisation = 0; // busy fraction of the busiest link, over the measured span
  int iterations = 0;          // how many iterations the figures average over
  int peak_server_incast = 0;  // most concurrent pushes into one server (PS only)
  double server_busy = 0;      // busy fraction of the busiest server link (PS only)
  Seconds collective_skew = 0; // measured only: see collective_skew()
};

struct Timeline {
  std::string source;          // "simulated" or "measured"
  std::string strategy;
  std::vector<std::string> process_names;  // index = worker id in events
  std::vector<Event> events;
  Summary summary;
};

// Chrome trace JSON. Several timelines (a prediction and a measurement) can go into
// one trace: each becomes its own set of processes, labelled "<source> <strategy>
// <process name>".
std::string chrome_trace_json(const std::vector<const Timeline*>& timelines);

// The summary as a JSON object (keys iteration_s, compute_s, exposed_comm_s,
// link_utilisation, iterations, for PS peak_server_incast and server_busy, and
// collective_skew_s where it is > 0).
std::string summary_json(const Summary& summary);

// How long the first worker to start a collective waits for the last, typically:
// the median, over the collectives that two or more workers recorded, of the spread
// of their start times. The k-th event of one name in one iteration is one
// collective on every worker. `collectives` are the workers' collective events. In
// a measured run the ranks are not in step (4 processes sharing 2 cores reach each
// message milliseconds apart); in a simulation the one representative worker is,
// so a measured skew is time the prediction does not have. 0 with no collective
// that two workers recorded.
Seconds collective_skew(const std::vector<Event>& collectives);

}  // namespace weft
