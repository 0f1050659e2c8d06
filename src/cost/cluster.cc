#include "cost/cluster.h"

#include <cmath>
#include <fmt/format.h>

namespace weft {

std::string_view to_string(Arch arch) {
  switch (arch) {
    case Arch::kAllReduce: return "allreduce";
    case Arch::kParameterServer: return "ps";
  }
  return "?";
}

Arch parse_arch(std::string_view text) {
  if (text == "allreduce") return Arch::kAllReduce;
  if (text == "ps") return Arch::kParameterServer;
  throw UsageError(fmt::format("--arch: '{}' is not an architecture; accepted: allreduce, ps", text));
}

namespace {

// Rejects NaN as well as out-of-range values: every comparison with NaN is false.
bool positive(double v) { return v > 0 && std::isfinite(v); }
bool non_negative(double v) { return v >= 0 && std::isfinite(v); }

}  // namespace

void validate(const Cluster& c) {
  if (c.workers < 1) {
    throw UsageError(fmt::format("--workers: {} workers; need at least 1", c.workers));
  }
  if (!positive(c.bandwidth)) {
    throw UsageError(fmt::format(
        "--bandwidth: {} bytes/s; need a finite rate > 0 (e.g. 1Gbit, 100Mbit, 10MB/s)",
        c.bandwidth));
  }
  if (!non_negative(c.latency)) {
    throw UsageError(fmt::format(
        "--latency: {} s; need a finite duration >= 0 (e.g. 50us, 2ms)", c.latency));
  }
  if (c.fitted) {
    if (!non_negative(c.fitted->a)) {
      throw UsageError(fmt::format(
          "fitted all-reduce a (--fit-a): {} s; need a finite duration >= 0", c.fitted->a));
    }
    if (!positive(c.fitted->b)) {
      throw UsageError(fmt::format(
          "fitted all-reduce b (--fit-b): {} s/byte; need a finite value > 0 "
          "(re-run `weft profile --network` if the fit came out non-positive)",
          c.fitted->b));
    }
  }
  if (c.arch == Arch::kParameterServer) {
    if (c.servers < 1) {
      throw UsageError(fmt::format("--servers: {} servers; need at least 1 for --arch ps",
                                   c.servers));
    }
    if (!(c.server_bandwidth == 0 || positive(c.server_bandwidth))) {
      throw UsageError(fmt::format(
          "--server-bandwidth: {} bytes/s; need a finite rate > 0, or 0 for the "
          "workers' --bandwidth",
          c.server_bandwidth));
    }
  }
}

namespace {

// Capacity of the all-reduce fabric link; see allreduce_flow(). REQUIRES P >= 2.
BytesPerSecond fabric_capacity(const Cluster& c) {
  if (c.fitted) return 1.0 / c.fitted->b;
  const double p = c.workers;
  return c.bandwidth * p / (2 * (p - 1));
}

BytesPerSecond server_rate(const Cluster& c) {
  return c.server_bandwidth > 0 ? c.server_bandwidth : c.bandwidth;
}

int worker_up(int p) { return 2 * p; }
int worker_down(int p) { return 2 * p + 1; }
int server_up(const Cluster& c, int s) { return 2 * c.workers + 2 * s; }
int server_down(const Cluster& c, int s) { return 2 * c.workers + 2 * s + 1; }

void check_endpoints(const Cluster& c, int worker, int server, Bytes n) {
  if (c.arch != Arch::kParameterServer || worker < 0 || worker >= c.workers || server < 0 ||
      server >= c.servers || n < 0) {
    throw std::logic_error(fmt::format(
        "parameter-server flow: worker {} server {} of {} bytes on a {} cluster of {} "
        "workers, {} servers",
        worker, server, n, to_string(c.arch), c.workers, c.servers));
  }
}

}  // namespace

LinkSet links_of(const Cluster& c) {
  LinkSet links;
  if (c.arch == Arch::kAllReduce) {
    // With one worker there is no fabric; the link exists so that ids stay valid, and
    // every flow on it has volume 0.
    links.capacity.push_back(c.workers > 1 ? fabric_capacity(c) : c.bandwidth);
    links.name.push_back("allreduce");
    return links;
  }
  for (int p = 0; p < c.workers; ++p) {
    links.capacity.push_back(c.bandwidth);
    links.name.push_back(fmt::format("worker{}.up", p));
    links.capacity.push_back(c.bandwidth);
    links.name.push_back(fmt::format("worker{}.down", p));
  }
  for (int s = 0; s < c.servers; ++s) {
    links.capacity.push_back(server_rate(c));
    links.name.push_back(fmt::format("server{}.up", s));
    links.capacity.push_back(server_rate(c));
    links.name.push_back(fmt::format("server{}.down", s));
  }
  return links;
}

// The ring moves 2(P−1)/P·n bytes over each worker's link in 2(P−1) steps, each
// paying α. Scaling the fabric's capacity by P/(2(P−1)) instead of the volume keeps
// `volume` equal to the message size, which is what traces and credits count.
Flow allreduce_flow(const Cluster& c, Bytes n) {
  if (c.arch != Arch::kAllReduce || n < 0) {
    throw std::logic_error(fmt::format("all-reduce flow of {} bytes on a {} cluster", n,
                                       to_string(c.arch)));
  }
  Flow flow;
  flow.links = {0};
  if (c.workers == 1) return flow;
  flow.startup = c.fitted ? c.fitted->a : 2.0 * (c.workers - 1) * c.latency;
  flow.volume = static_cast<double>(n);
  return flow;
}

Seconds allreduce_time(const Cluster& c, Bytes n) {
  const Flow flow = allreduce_flow(c, n);
  if (flow.volume == 0) return flow.startup;
  return flow.startup + flow.volume / fabric_capacity(c);
}

Flow push_flow(const Cluster& c, int worker, int server, Bytes n) {
  check_endpoints(c, worker, server, n);
  return Flow{.startup = c.latency,
              .volume = static_cast<double>(n),
              .links = {worker_up(worker), server_down(c, server)}};
}

Flow pull_flow(const Cluster& c, int server, int worker, Bytes n) {
  check_endpoints(c, worker, server, n);
  return Flow{.startup = c.latency,
              .volume = static_cast<double>(n),
              .links = {server_up(c, server), worker_down(worker)}};
}

}  // namespace weft
