// The cluster and its cost model (SPEC §1.2).
//
// A cluster is P workers whose links have bandwidth B and per-message latency α,
// arranged for ring all-reduce or around S parameter servers. Costs follow the α–β
// model (Thakur, Rabenseifner & Gropp 2005); a user may instead supply a fitted
// `T(n) = a + b·n` for all-reduce, measured by `weft profile --network`.
//
// Every transfer is described as a *flow*: a startup time that uses no bandwidth,
// then a volume of bytes that crosses one or more links. Flows that cross the same
// link share it max-min fairly (see sim/network.h). That single mechanism models
// both concurrent all-reduces (fluid processor sharing of one collective fabric)
// and a parameter server's incast.
//
// Thread-safety: plain data; the functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft {

enum class Arch { kAllReduce, kParameterServer };
std::string_view to_string(Arch arch);
Arch parse_arch(std::string_view text);  // "allreduce" | "ps"; THROWS UsageError

// T(n) = a + b·n for one all-reduce of n bytes.
struct FittedAllReduce {
  Seconds a = 0;
  double b = 0;  // seconds per byte
};

struct Cluster {
  int workers = 1;
  BytesPerSecond bandwidth = 0;   // each worker's link
  Seconds latency = 0;            // per message, α
  Arch arch = Arch::kAllReduce;
  int servers = 1;                       // parameter server only
  BytesPerSecond server_bandwidth = 0;   // each server's link; 0 = same as workers'
  std::optional<FittedAllReduce> fitted;  // overrides the α–β ring model
};

// THROWS UsageError for workers < 1, bandwidth <= 0, latency < 0, servers < 1 (ps).
void validate(const Cluster& cluster);

// The network resources a flow can cross. Link ids are dense small integers.
// - all-reduce: link 0 is the collective fabric (all workers' links acting as one);
// - parameter server: per worker p, uplink 2p and downlink 2p+1; per server s,
//   uplink 2P+2s and downlink 2P+2s+1 (full duplex: each direction shaped apart).
struct LinkSet {
  std::vector<BytesPerSecond> capacity;
  std::vector<std::string> name;  // "allreduce", "worker3.up", "server0.down", ...
};
LinkSet links_of(const Cluster& cluster);

struct Flow {
  Seconds startup = 0;        // time before bytes move (latency terms)
  double volume = 0;          // bytes crossing each link in `links`, scaled so that
                              // volume / capacity is the transfer time when alone
  std::vector<int> links;     // ids into links_of(cluster)
};

// One ring all-reduce of n bytes: startup 2(P−1)α, volume n on the fabric link
// whose capacity is B·P / (2(P−1)), so that alone it takes exactly
// 2(P−1)α + 2(P−1)/P · n/B; with `fitted`, startup a and capacity 1/b.
// With P = 1 it is free (startup 0, volume 0).
Flow allreduce_flow(const Cluster& cluster, Bytes n);
Seconds allreduce_time(const Cluster& cluster, Bytes n);  // the flow, alone

// Parameter-server transfers of n bytes between worker p and server s.
Flow push_flow(const Cluster& cluster, int worker, int server, Bytes n);
Flow pull_flow(const Cluster& cluster, int server, int worker, Bytes n);

}  // namespace weft
