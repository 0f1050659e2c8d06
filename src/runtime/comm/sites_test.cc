// The sums over sites (Note [Sum by sites], sites.h) with workers as threads over
// an in-memory store: every topology's sum by sites is the sum over all workers on
// every worker, a site's sum its own workers', several sums in flight at once
// complete each with its own values, and a ring between the leaders (Between)
// runs on the leaders only, on their sites' sums.
#include "runtime/comm/sites.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace weft::runtime {
namespace {

Topology topology_of(const std::vector<std::vector<int>>& sites) {
  Topology t{.wan = {.bandwidth = 1e6, .latency = 0}};
  for (const auto& ranks : sites) t.sites.push_back({.ranks = ranks, .bandwidth = 1e8, .latency = 0});
  return t;
}

int workers_in(const Topology& t) {
  int n = 0;
  for (const Site& s : t.sites) n += static_cast<int>(s.ranks.size());
  return n;
}

// Rank r's values for sum k: (r + 1) · (k + 1) + 0, 1, 2, ...
torch::Tensor values(int rank, int k, int n) {
  return torch::arange(n, torch::kFloat32).add_(static_cast<double>((rank + 1) * (k + 1)));
}

// Runs `body(collectives, rank)` on one thread per worker of `topology`.
void on_every_worker(const Topology& topology, const std::function<void(SiteCollectives&, int)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const int workers = workers_in(topology);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(workers));
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        SiteCollectives sites(store, topology, r, workers, /*timeout=*/30);
        body(sites, r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < workers; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

void wait(const Summing& s) {
  s.done->wait();
  ASSERT_FALSE(s.done->hasError());
}

class EveryTopology : public testing::TestWithParam<std::vector<std::vector<int>>> {};

TEST_P(EveryTopology, ASumBySitesIsTheSumOverAllWorkersAndASitesSumItsOwn) {
  const Topology topology = topology_of(GetParam());
  const int workers = workers_in(topology);
  constexpr int kSums = 3;
  on_every_worker(topology, [&](SiteCollectives& sites, int rank) {
    // Several at once, of several sizes: each completes with its own sum.
    std::vector<Summing> by_sites, in_site;
    for (int k = 0; k < kSums; ++k) by_sites.push_back(sites.start_sum_by_sites(values(rank, k, 5 + 1000 * k)));
    for (int k = 0; k < kSums; ++k) {
      wait(by_sites[static_cast<size_t>(k)]);
      torch::Tensor expected = torch::zeros({5 + 1000 * k});
      for (int r = 0; r < workers; ++r) expected.add_(values(r, k, 5 + 1000 * k));
      EXPECT_TRUE(torch::equal(sum_of(by_sites[static_cast<size_t>(k)].result), expected)) << "sum " << k;
    }
    const Summing site = sites.start_site_sum(values(rank, 0, 7));
    wait(site);
    torch::Tensor expected = torch::zeros({7});
    for (int r : topology.sites[static_cast<size_t>(site_of(topology, rank))].ranks) expected.add_(values(r, 0, 7));
    EXPECT_TRUE(torch::equal(sum_of(site.result), expected));
    const std::vector<int>& mine = topology.sites[static_cast<size_t>(sites.site())].ranks;
    EXPECT_EQ(sites.site_workers(), static_cast<int>(mine.size()));
    EXPECT_EQ(sites.sites(), static_cast<int>(topology.sites.size()));
    EXPECT_EQ(sites.leader(), mine.front() == rank);
  });
}

INSTANTIATE_TEST_SUITE_P(Sites, EveryTopology,
                         testing::Values(std::vector<std::vector<int>>{{0, 1}, {2, 3}},
                                         std::vector<std::vector<int>>{{0, 1, 2}, {3}},
                                         std::vector<std::vector<int>>{{0, 1, 2, 3}},
                                         std::vector<std::vector<int>>{{0}, {1}, {2}, {3}},
                                         std::vector<std::vector<int>>{{0, 2}, {1, 3}},
                                         std::vector<std::vector<int>>{{0}}),
                         [](const auto& info) { return std::to_string(info.index); });

TEST(SumBySites, ALeadersStageReplacedRunsOnTheLeadersOnlyOnTheirSitesSums) {
  const Topology topology = topology_of({{0, 1}, {2, 3}});
  std::atomic<int> calls = 0;
  on_every_worker(topology, [&](SiteCollectives& sites, int rank) {
    const Summing s = sites.start_sum_by_sites(values(rank, 0, 4), [&](torch::Tensor& site_sum) {
      ++calls;
      EXPECT_TRUE(sites.leader());
      const int site = sites.site();
      EXPECT_TRUE(torch::equal(site_sum, values(2 * site, 0, 4) + values(2 * site + 1, 0, 4)));
      site_sum.fill_(42);
    });
    wait(s);
    EXPECT_TRUE(torch::equal(s.result, torch::full({4}, 42.0f))) << "rank " << rank;
  });
  EXPECT_EQ(calls, 2);
}

TEST(SumBySites, AWorkerInNoSiteIsNamed) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  try {
    SiteCollectives sites(store, topology_of({{0}}), 1, 2, 5);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::runtime
