// The sites of a job as one worker sees them (Note [Sites in a schedule] in
// schedule/schedule.h): the Gloo groups its site's workers and the sites'
// leaders share, and the two sums the averaging executor (runtime/comm/
// averaging.cc) and the codecs (runtime/comm/codecs.h) run on them — a site's
// sum (Reach::kSite) and the sum by sites (Reach::kBySites).
//
// Note [Sum by sites]
// -------------------
// Rule: a sum by sites is three collectives, in turn: an all-reduce of the
// site's workers, an all-reduce of the sites' leaders (each site's lowest worker
// rank) on their sites' sums — two leaders swap them by all-gather instead, one
// round trip where a ring takes two, the same bytes (Note [Collectives across
// sites] in cost/cluster.h) — and a broadcast from the leader inside its site.
// Every worker then holds the sum over all workers, bit-identical: the leaders
// hold the same bytes after their all-reduce and the others receive them.
// A site of one worker skips its own all-reduce and broadcast; one site skips
// the leaders' stage. A ring codec replaces the leaders' all-reduce by its own
// ring between the leaders (Between), so the bytes that cross the WAN are the
// encoded ones and a site's sum inside stays exact.
// Invariant: every worker adds its sums by sites in the same order, and they run
// one at a time, in that order, on a thread of their own (serial_jobs.h). Why:
// Gloo matches the collectives of a group by the order each rank issues them;
// two sums in flight at once could reach the leaders' group in one order on one
// leader and in the other on another — adding up different messages, or
// deadlocking — since a leader's site finishes its stage when its slowest worker
// arrives. One at a time also means the leaders' group never waits behind
// a site's broadcast of the sum before. The site averages (Reach::kSite) use a
// group of their own, issued by the engine's thread in the engine's order (Note
// [Collective order] in runtime/comm/engine.h), so that they never race the sums
// by sites for the site's group. Neither ever sums by all-gather (Note [Small
// all-reduces by all-gather] in process_group.h): its threshold is measured
// for one uniform link.
//
// Thread-safety: start_site_sum from one thread (the engine's); start_sum_by_sites
// from any thread, but each caller's order is the order the sums run in, so every
// worker's callers must add them in one order (Note [Sum by sites]).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include "cost/topology.h"
#include "runtime/comm/process_group.h"
#include "runtime/comm/serial_jobs.h"
#include "schedule/schedule.h"
#include "units/units.h"

namespace weft::runtime {

// Whether `schedule` has an operation whose reach is not Reach::kAll: its
// workers then need their SiteCollectives.
bool uses_sites(const Schedule& schedule);

class SiteCollectives {
 public:
  // On a leader with 2+ sites, instead of the leaders' all-reduce: turns the site's
  // sum (in place) into the sum over all workers, using leaders().
  using Between = std::function<void(torch::Tensor& site_sum)>;

  // Opens the groups of worker `rank` of `workers` (ranks 0..workers-1 train; a
  // site's ranks of workers or above are servers and take no part), rendezvousing
  // under `store` with its site's workers and, on a leader, with the other sites'
  // leaders; every worker must open them, none waiting for another to finish
  // training first. THROWS std::invalid_argument naming the rank when `topology`
  // puts this worker in no site, or the error of a group that does not connect
  // within `timeout` (binding `address`).
  SiteCollectives(const c10::intrusive_ptr<c10d::Store>& store, const Topology& topology, int rank, int workers,
                  Seconds timeout, const std::string& address = "127.0.0.1");
  // Aborts the sum by sites in progress; those not started never complete.
  ~SiteCollectives();
  SiteCollectives(const SiteCollectives&) = delete;
  SiteCollectives& operator=(const SiteCollectives&) = delete;

  int site() const { return site_; }                    // this worker's site's index
  int sites() const { return sites_; }                  // sites with a worker
  int site_workers() const { return site_workers_; }    // workers in this worker's site
  int workers() const { return workers_; }
  bool leader() const { return leader_; }               // the lowest worker rank of its site
  // The leaders' group (rank = the site's index among the sites with workers);
  // null on a worker that is not a leader, and with one site.
  c10d::ProcessGroup* leaders() const { return leaders_.get(); }

  // Starts summing `buffer` (1-D, contiguous) over this worker's site by ring
  // all-reduce, in place (at once for a site of one worker). Every worker of the
  // site must start the same sums, of the same sizes, in the same order.
  Summing start_site_sum(const torch::Tensor& buffer);
  // Starts summing `buffer` (1-D, contiguous, float32 or float16) over every
  // worker by sites (Note [Sum by sites]), in place; `between`, if set, replaces
  // the leaders' all-reduce. Every worker must start the same sums, of the same
  // sizes, in the same order; `result` is `buffer`.
  Summing start_sum_by_sites(const torch::Tensor& buffer, Between between = {});

 private:
  void sum_by_sites(torch::Tensor buffer, const Between& between);

  int site_ = -1, sites_ = 0, site_workers_ = 0, workers_ = 0;
  bool leader_ = false;
  c10::intrusive_ptr<c10d::ProcessGroup> site_average_;  // kSite; null for a site of one worker
  c10::intrusive_ptr<c10d::ProcessGroup> site_sum_;      // the site's stages of kBySites; null likewise
  c10::intrusive_ptr<c10d::ProcessGroup> leaders_;
  SerialJobs jobs_;  // last: its thread runs the sums, which use the groups above
};

}  // namespace weft::runtime
