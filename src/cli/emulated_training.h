// `weft train --nproc K --bandwidth Q`: the local job's workers (and servers) each
// run in their own network namespace behind a link shaped to Q, through
// netem/netem.h's run_emulated — what `weft netem --workers K --bandwidth Q -- weft
// train ...` does, in one command.
//
// Note [Training on emulated links]
// weft train's --bandwidth is what the planner assumes when it builds the schedule
// (mgwfbp merging, dcredit windows, ...). When this process launches the job itself
// (--nproc) and --bandwidth is given, the same rate is also emulated, so the
// schedule is planned for the link it runs on. Inside a job someone else started
// (`weft netem`, Slurm, hosts on a real network) the links are what they are and
// --bandwidth only informs the planner; so `weft netem ... -- weft train
// --bandwidth Q` (what `weft bench` runs) neither nests namespaces nor needs the
// ranks to be root. Without --bandwidth, `--nproc K` trains over loopback as before.
// Each rank re-runs this command line (/proc/self/exe with the same arguments),
// marked as a launched worker (Note [Launcher and workers], runtime/launch/launcher.h), so
// --nproc and --bandwidth are acted on once, here. --latency, when given, is emulated
// too (netem::NetemOptions::latency); its default (50us) only informs the planner, so
// the links then have no delay of their own. The ranks
// plan for what TCP delivers over the shaped links (netem::payload_rate, about 95%
// of the rate at a 1500-byte MTU), as `weft bench` does: the launch tells them the
// links' MTU in runtime::kEmulatedMtuVariable, and runtime::cluster_of (runtime/train/job.h) applies it.
//
// Thread-safety: run_emulated_training once per process, from the main thread.
#pragma once

#include <string>

#include "cli/site_options.h"
#include "cost/cluster.h"
#include "netem/netem.h"
#include "units/cores.h"
#include "units/units.h"

namespace CLI {
class App;
}

namespace weft::cli {

struct EmulatedTraining {
  int workers = 0;                      // --nproc, >= 1
  int servers = 0;                      // --servers (parameter-server strategies), >= 0
  BytesPerSecond bandwidth = 0;         // --bandwidth: each worker's link, > 0
  BytesPerSecond server_bandwidth = 0;  // --server-bandwidth; 0 = bandwidth
  Seconds latency = 0;                  // --latency when given: each link's one-way delay; 0 = none
  Seconds failure_timeout = 60;         // after a rank fails, how long the others may take to exit
  CorePlacement cores = CorePlacement::kAuto;  // --cores (netem::NetemOptions::cores)
  netem::SiteFlags sites;               // --sites/--topology/--wan-*: emulated sites (netem.h)
};

// Whether weft train runs its job under emulated links (the note): --bandwidth and
// --nproc given, and this process is not itself a launched worker.
bool trains_on_emulated_links(bool bandwidth_given, bool nproc_given);

// Runs this command line once per rank under emulated links and returns the job's
// exit status (0 when every rank succeeded; else the first failed rank's, as
// `weft netem`), printing what happened to a failed job on stderr.
// THROWS UsageError without the privileges to build namespaces, saying to use sudo
// or to leave out --bandwidth; otherwise what run_emulated throws.
int run_emulated_training(const EmulatedTraining& job);

}  // namespace weft::cli
