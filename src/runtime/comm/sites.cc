#include "runtime/comm/sites.h"

#include <limits>

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace weft::runtime {
namespace {

// A group of `members` (ascending) as `rank` sees it, or null for one member.
c10::intrusive_ptr<c10d::ProcessGroup> open_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const std::string& name, const std::vector<int>& members, int rank,
                                                  Seconds timeout, const std::string& address) {
  if (members.size() < 2) return {};
  const auto at = std::find(members.begin(), members.end(), rank);
  return make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("weft/sites/" + name, store),
                         static_cast<int>(at - members.begin()), static_cast<int>(members.size()), timeout, address,
                         /*threads=*/1);
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait()) throw std::runtime_error("the collective was aborted");
}

c10::intrusive_ptr<c10::ivalue::Future> completed() {
  auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
  done->markCompleted(c10::IValue());
  return done;
}

}  // namespace

bool uses_sites(const Schedule& schedule) {
  for (const auto& ops : schedule.iterations) {
    for (const CommOp& op : ops) {
      if (op.reach != Reach::kAll) return true;
    }
  }
  return false;
}

SiteCollectives::SiteCollectives(const c10::intrusive_ptr<c10d::Store>& store, const Topology& topology, int rank,
                                 int workers, Seconds timeout, const std::string& address)
    : workers_(workers) {
  std::vector<int> firsts;  // each site's leader, in site order: the leaders' ranks
  std::vector<int> mine;
  for (std::size_t s = 0; s < topology.sites.size(); ++s) {
    std::vector<int> members;
    for (int r : topology.sites[s].ranks) {
      if (r >= 0 && r < workers) members.push_back(r);
    }
    std::sort(members.begin(), members.end());
    if (members.empty()) continue;
    if (std::find(members.begin(), members.end(), rank) != members.end()) {
      site_ = static_cast<int>(firsts.size());
      mine = members;
    }
    firsts.push_back(members.front());
  }
  if (site_ < 0) {
    throw std::invalid_argument(fmt::format("rank {}: the job's topology puts this worker in no site (it has {} "
                                            "site{} of workers)",
                                            rank, firsts.size(), firsts.size() == 1 ? "" : "s"));
  }
  sites_ = static_cast<int>(firsts.size());
  site_workers_ = static_cast<int>(mine.size());
  leader_ = mine.front() == rank;
  // The site's groups first, then the leaders': a leader's site-mates do not wait
  // for the leaders' rendezvous, so no worker waits for one that waits for it.
  site_average_ = open_group(store, fmt::format("{}/average", site_), mine, rank, timeout, address);
  site_sum_ = open_group(store, fmt::format("{}/sum", site_), mine, rank, timeout, address);
  if (leader_) leaders_ = open_group(store, "leaders", firsts, rank, timeout, address);
}

SiteCollectives::~SiteCollectives() = default;

Summing SiteCollectives::start_site_sum(const torch::Tensor& buffer) {
  if (!site_average_) return {.done = completed(), .result = buffer};
  std::vector<torch::Tensor> tensors{buffer};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  return {.done = site_average_->allreduce(tensors, options)->getFuture(), .result = buffer};
}

Summing SiteCollectives::start_sum_by_sites(const torch::Tensor& buffer, Between between) {
  return {.done = jobs_.add([this, buffer, between = std::move(between)] { sum_by_sites(buffer, between); }),
          .result = buffer};
}

// Note [Sum by sites].
void SiteCollectives::sum_by_sites(torch::Tensor buffer, const Between& between) {
  std::vector<torch::Tensor> tensors{buffer};
  c10d::AllreduceOptions sum;
  sum.reduceOp = c10d::ReduceOp::SUM;
  if (site_sum_) wait(jobs_.track(site_sum_->allreduce(tensors, sum)));
  if (leaders_) {
    if (between) {
      between(buffer);
    } else if (leaders_->getSize() == 2) {
      // Two leaders swap their sums: one step where a ring takes two, the same
      // bytes; both add the two in rank order, so they hold the same bits.
      torch::Tensor rows = torch::empty({2, buffer.numel()}, buffer.options());
      std::vector<std::vector<torch::Tensor>> gathered{{rows[0], rows[1]}};
      wait(jobs_.track(leaders_->allgather(gathered, tensors)));
      torch::add_out(buffer, rows[0], rows[1]);
    } else {
      wait(jobs_.track(leaders_->allreduce(tensors, sum)));
    }
  }
  c10d::BroadcastOptions from_leader;
  from_leader.rootRank = 0;  // the site's lowest worker rank
  if (site_sum_) wait(jobs_.track(site_sum_->broadcast(tensors, from_leader)));
}

}  // namespace weft::runtime
