// Rendezvous and collectives for one worker: a c10d::TCPStore (rank 0 hosts the
// server at MASTER_ADDR:MASTER_PORT) and a c10d::ProcessGroupGloo over TCP
// (docs/runtime.md §3; no home-made transport).
//
// Which address Gloo binds: GLOO_SOCKET_IFNAME if set (as in PyTorch); otherwise
// the local address the kernel would use to reach MASTER_ADDR, so that workers in
// network namespaces (`weft netem`) or on several hosts bind the interface that
// actually leads to their peers, and a local job binds 127.0.0.1.
//
// Every blocking step — connecting to the store, the store waiting for all
// workers, Gloo's full-mesh connect, and every later collective — gives up after
// `timeout` with an exception; nothing here waits forever.
//
// Note [Small all-reduces by all-gather]
// --------------------------------------
// Rule: messages of at most `gather_below` bytes (measured per link by `weft
// profile --network`, 0 without a measurement) are summed by all-gather, every
// rank adding the P buffers in rank order; larger ones by Gloo's ring.
// Invariant: either way every rank holds bit-identical sums. Why: the ring takes
// 2(P−1) hand-offs and moves 2(P−1)/P·n bytes per rank, the all-gather P−1
// hand-offs and (P−1)·n bytes; fewer steps win for small messages, fewer bytes
// for large ones, and where they cross depends on the link (behind 100Mbit links
// about 16 KiB, behind 1Gbit about 64 KiB, behind 20Mbit below 4 KiB).
//
// Thread-safety: the store and the process group are thread-safe (c10d's
// contract); connect() itself is called once per worker.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/types.h>

#include "cost/cluster.h"
#include "runtime/launch/worker_env.h"
#include "units/units.h"

namespace weft::runtime {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> collectives;
  int rank = 0;
  int world = 1;
  std::string address;  // the local address Gloo binds
  Seconds timeout = 0;  // of every blocking step, as given to connect()
};

// Note [Rank 0 decides]
// Rule: what every rank must agree on but only one can measure or read (the
// profile and tuned options of Note [Shared schedule], the checkpoint to resume
// from) is decided by rank 0 alone and published in the store under `key`; every
// rank, rank 0 included, returns that text. If `decide` throws on rank 0, its
// message is published instead: rank 0 rethrows, every other rank throws
// UsageError("`failed`: message") — no rank waits for a decision that never comes.
std::string decided_by_rank0(const Group& group, const std::string& key,
                             const std::function<std::string()>& decide, std::string_view failed);

// Rendezvous of rank env.rank with the others. THROWS std::runtime_error naming
// MASTER_ADDR:MASTER_PORT, the rank and the timeout when the peers do not all
// arrive in time or the address cannot be bound.
Group connect(const WorkerEnv& env, Seconds timeout);

// A Gloo process group over an existing store, binding `hostname` (an address of
// this machine), running its collectives on `threads` threads (Gloo runs each one
// to its end on one of them). Used by connect() and by tests that run ranks as
// threads over a c10d::HashStore.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int world, Seconds timeout,
                                                       const std::string& hostname = "127.0.0.1",
                                                       int threads = kRuntimeCollectiveThreads);

// Another Gloo group of the same ranks, with its own connections and threads, so
// that what it carries never waits behind `group`'s collectives. `name` keeps its
// rendezvous keys apart; every rank must open it, with the same name, and no other
// group of the job may have used that name: the keys outlive the group, and a
// second group under them would read the first one's closed addresses.
c10::intrusive_ptr<c10d::ProcessGroup> open_subgroup(const Group& group, const std::string& name, int threads);

// An element-wise sum over the ranks of a group, in progress.
struct Summing {
  c10::intrusive_ptr<c10::ivalue::Future> done;
  torch::Tensor result;  // once `done` completes, what sum_of turns into the sum
};

// Starts summing `buffer` (1-D, contiguous) over every rank of `group`: by ring
// all-reduce, in place, or — when it has at most `gather_below` bytes — by
// all-gather (Note [Small all-reduces by all-gather]). Every rank must call it
// with the same size and the same `gather_below`, in the same order.
Summing start_sum(c10d::ProcessGroup& group, const torch::Tensor& buffer, Bytes gather_below);

// The sum, once the Summing's `done` has completed without error: `result` itself
// after an all-reduce, the gathered buffers added in rank order after an all-gather.
torch::Tensor sum_of(const torch::Tensor& result);

// Waits, in the order they were added, for each set of point-to-point works
// (c10d's Gloo send and recv give no future), then completes the set's future, or
// fails it with the error. One thread waits for every set.
class WorkWaiter {
 public:
  WorkWaiter();
  // Aborts the works still pending; their futures stay incomplete.
  ~WorkWaiter();
  WorkWaiter(const WorkWaiter&) = delete;
  WorkWaiter& operator=(const WorkWaiter&) = delete;

  void add(std::vector<c10::intrusive_ptr<c10d::Work>> works, c10::intrusive_ptr<c10::ivalue::Future> done);

 private:
  struct Pending {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    c10::intrusive_ptr<c10::ivalue::Future> done;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Pending> queue_;  // guarded by mutex_
  bool stopping_ = false;      // guarded by mutex_
  std::thread thread_;         // last: starts after the members it uses
};

// Note [A common time origin]
// ---------------------------
// The ranks' timelines line up in one trace only if they count from one instant,
// and each rank leaves the start barrier at an instant of its own: with 4
// processes on 2 cores a rank may wait milliseconds for a core first. Counted from
// their own exits, a traced plsgd run at 1Gbit had each collective end a median
// 6.0 ms early on one rank and 4.4–4.5 ms late on two others, where it ends on
// all of them at once; the issue times of every collective were as far off.
// Ranks on one boot of one machine (the kernel's boot_id) read the same
// CLOCK_MONOTONIC, which is steady_clock on Linux: they count from the latest of
// their exits, the instant every rank had left. Ranks on several machines, whose
// clocks share no origin, each keep their own exit.

// Recorder's origin for `rank` of `world` (Note [A common time origin]): the
// latest of the `left` that every rank on the same `machine` gave, or `left`
// itself where the ranks' machines differ or one is unknown (""). Every rank must
// call it once, after the same barrier; it waits for all of them on `store`.
std::chrono::steady_clock::time_point common_origin(c10d::Store& store, int rank, int world,
                                                    const std::string& machine,
                                                    std::chrono::steady_clock::time_point left);

// The same for ranks [0, ranks) of `group` (every one calls it), its rank leaving
// the barrier now, on this boot of this machine.
std::chrono::steady_clock::time_point common_origin(const Group& group, int ranks);

// The local IPv4 address used to reach `host` (no packet is sent). THROWS
// std::runtime_error naming the host if it does not resolve or is unreachable.
std::string local_address_towards(const std::string& host);

}  // namespace weft::runtime
