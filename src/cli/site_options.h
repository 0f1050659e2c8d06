// The command line's emulated sites (--sites, --topology, --wan-*; netem/netem.h),
// shared by weft netem, which every build has, and weft run and weft train
// --nproc, which need the runtime.
//
// Thread-safety: pure functions; add_site_options from the main thread.
#pragma once

#include <string>

#include "netem/netem.h"

namespace CLI {
class App;
}

namespace weft::cli {

// Adds --sites, --topology, --wan-bandwidth and --wan-latency (emulated sites,
// netem/netem.h) to `command`, read into `flags`, which must outlive it.
void add_site_options(CLI::App& command, netem::SiteFlags& flags);

// "2 sites (ranks 0-1 | 2-3) at 1Gbit inside, 20Mbit and 20ms one-way between them",
// for the line a command prints before it runs; "" without sites.
std::string describe_sites(const netem::NetemOptions& network);

}  // namespace weft::cli
