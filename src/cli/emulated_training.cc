#include "cli/emulated_training.h"

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "netem/netem.h"
#include "netem/netns.h"
#include "netem/shaping.h"
#include "runtime/launch/launcher.h"
#include "runtime/train/job.h"

namespace weft::cli {

bool trains_on_emulated_links(bool bandwidth_given, bool nproc_given) {
  return bandwidth_given && nproc_given && !runtime::is_launched_worker();
}

int run_emulated_training(const EmulatedTraining& job) {
  const std::string rate = format_bandwidth(job.bandwidth);
  if (!netem::has_network_privileges()) {
    throw UsageError(fmt::format(
        "--bandwidth {} with --nproc {}: emulating the workers' links needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN, "
        "for network namespaces and tc); run it with sudo. Without root, leave out --bandwidth to train over "
        "loopback (the planner then assumes --network FILE, from `weft profile --network --nproc {}`, or 1Gbit)",
        rate, job.workers, job.workers));
  }
  netem::NetemOptions network{.workers = job.workers,
                              .servers = job.servers,
                              .bandwidth = job.bandwidth,
                              .latency = job.latency,
                              .server_bandwidth = job.server_bandwidth,
                              .cores = job.cores};
  netem::apply_site_flags(job.sites, network);
  netem::validate(network);
  // The same command line in every rank, from this very executable (Note [Training
  // on emulated links]).
  std::vector<std::string> argv = runtime::current_command_line();
  argv.at(0) = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::vector<std::string>> argv_per_rank(static_cast<std::size_t>(job.workers + job.servers),
                                                            argv);
  std::cerr << fmt::format("weft train: {} worker{}{} on emulated {} links (weft netem), planned for the {} "
                           "TCP delivers over them\n",
                           job.workers, job.workers == 1 ? "" : "s",
                           job.servers == 0 ? "" : fmt::format(" and {} server{}", job.servers,
                                                               job.servers == 1 ? "" : "s"),
                           rate, format_bandwidth(netem::payload_rate(job.bandwidth, network.mtu)));
  if (!network.sites.empty()) std::cerr << "weft train: " << describe_sites(network) << "\n";
  const netem::RunReport report =
      netem::run_emulated(network, argv_per_rank, {.grace = job.failure_timeout},
                          {std::string(runtime::kLaunchedWorkerVariable) + "=1",
                           fmt::format("{}={}", runtime::kEmulatedMtuVariable, network.mtu)});
  if (report.exit_status != 0) std::cerr << "weft train: " << report.message << "\n";
  return report.exit_status;
}

}  // namespace weft::cli
