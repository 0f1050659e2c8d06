// Rendezvous and collectives for one worker: a c10d::TCPStore (rank 0 hosts the
// server at MASTER_ADDR:MASTER_PORT) and a c10d::ProcessGroupGloo over TCP
// (SPEC §3; no home-made transport).
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
// Thread-safety: the store and the process group are thread-safe (c10d's
// contract); connect() itself is called once per worker.
#pragma once

#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "runtime/worker_env.h"
#include "units/units.h"

namespace weft::runtime {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> collectives;
  int rank = 0;
  int world = 1;
};

// Rendezvous of rank env.rank with the others. THROWS std::runtime_error naming
// MASTER_ADDR:MASTER_PORT, the rank and the timeout when the peers do not all
// arrive in time or the address cannot be bound.
Group connect(const WorkerEnv& env, Seconds timeout);

// A Gloo process group over an existing store, binding `hostname` (an address of
// this machine). Used by connect() and by tests that run ranks as threads over a
// c10d::HashStore.
c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int world, Seconds timeout,
                                                       const std::string& hostname = "127.0.0.1");

// The local IPv4 address used to reach `host` (no packet is sent). THROWS
// std::runtime_error naming the host if it does not resolve or is unreachable.
std::string local_address_towards(const std::string& host);

}  // namespace weft::runtime
