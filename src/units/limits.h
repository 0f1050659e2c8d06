// The largest inputs weft accepts, in one table (docs/limits.md says the same to
// users). Every count and size a user gives, on the command line or in a file,
// is checked against these before anything is allocated for it, so that a typo
// (an extra three zeros) is a one-line error and not gigabytes of memory or an
// hour of simulation.
//
// Each limit is far above any real use and far below what breaks weft; its
// reason says which.
#pragma once

#include <cstddef>
#include <cstdint>

namespace weft::limits {

// Workers of one planned or simulated cluster: the largest data-parallel jobs
// run on tens of thousands of accelerators; the simulator keeps a few words per
// worker per operation.
inline constexpr int kMaxWorkers = 65'536;
// Parameter servers: as many as workers at most is what anyone deploys.
inline constexpr int kMaxServers = kMaxWorkers;
// Processes started on this one machine (`weft bench`, `weft train`, `weft netem`
// workers and servers): each is a real process with its own memory (a LibTorch
// worker needs hundreds of MB) and, emulated, its own network namespace.
inline constexpr int kMaxProcesses = 256;
// Layers of one model: the deepest models have a few thousand; the planner's
// work grows with layers times blocks.
inline constexpr int kMaxLayers = 100'000;
// Iterations simulated or trained (`weft simulate -n`, `--steps`): the simulator
// keeps every event of every iteration for its timeline.
inline constexpr int kMaxIterations = 100'000;
// Iterations in one schedule period (local SGD's H, the interleaving T, a
// schedule file's period).
inline constexpr int kMaxPeriod = 10'000;
// Any duration given: a layer's compute time, a latency, an offset, a measured
// time. A day is beyond any one step; a double near its largest value would make
// sums overflow to infinity and the simulator's clock stop advancing.
inline constexpr double kMaxSeconds = 86'400;
// The slowest link or fitted transfer rate: a byte a second (8 bit/s, a
// fitted b of 1 s/byte). Slower is no network, and the time of a petabyte at a
// rate near zero overflows a double.
inline constexpr double kMinBytesPerSecond = 1;
// A slowdown, drift or other ratio of one time to another: interference that made
// work a thousand times slower would be a broken machine, not a measurement.
inline constexpr double kMaxFactor = 1'000;
// Any size in bytes (a layer, a chunk, a credit): a petabyte, so that sums of
// sizes over layers and workers stay exact in a double and far from overflow.
inline constexpr std::int64_t kMaxBytes = std::int64_t{1} << 50;
// Messages of one iteration a partition may cut a model into (--partition,
// --credit): a floor of a KiB on their size keeps most models far below it; a
// million is where one iteration's state in the simulator and the runtime grows
// past a few hundred MB.
inline constexpr std::int64_t kMaxMessages = std::int64_t{1} << 20;
// Events one simulation handles: about iterations × (operations + layers) ×
// simulated workers (Note [Bounded simulation], sim/simulator.cc); each factor
// bounded alone still allows days of work. The simulator handles 1.5 to 5
// million events a second (bytescheduler's blocks to wfbp's layers, one core).
inline constexpr double kMaxSimulatedEvents = 1e8;
// Nesting of a JSON document: weft's formats nest 5 deep at most.
inline constexpr int kMaxJsonDepth = 64;
// Elements of one JSON array: ten times the longest a file of weft's holds (a
// profile's layers, a merged operation's chunks).
inline constexpr std::size_t kMaxJsonArray = 1'000'000;
// Bytes of one input file: far beyond any profile, schedule or result weft
// reads, and small enough to hold in memory (Note [Bounded reads], files.cc).
inline constexpr std::size_t kMaxInputBytes = std::size_t{1} << 30;
// Seconds an input FIFO, pipe or device may stay silent before its first byte or
// its end: a FIFO that no program writes to would otherwise block forever; a
// producer behind `<(...)` that needs longer can write to a file first.
inline constexpr double kMaxInputWait = 10;

}  // namespace weft::limits
