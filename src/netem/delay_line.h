// A delaying switch: the hub of an emulated network when its links have a latency
// (netem.h), in place of the kernel's bridge.
//
// Note [A delaying switch]
// Rule: with --latency D > 0 the hub's ends of the links join no bridge; a thread
// of the process that built the network, entered into the hub namespace, reads
// each frame arriving on a hub port (an AF_PACKET socket per port), holds it D
// from when it was read, and writes it to the port its destination MAC was learnt
// on (every other port for broadcast, multicast and unknown MACs). A frame thus
// crosses its sender's upload tbf, D, and its receiver's download tbf: a small
// message's round trip takes 2·D and bulk transfers keep the links' rates.
// Why: our kernels have no netem qdisc (nor fq, which honours departure times a
// BPF program could set), and tbf delays nothing but its queue. A thread, unlike a
// child process, dies with its process on any signal, SIGKILL included; the
// stale-namespace sweep (netns.h) removes the rest.
// How: the sockets carry the virtio_net_hdr (PACKET_VNET_HDR) from receive to
// send, so a 64 KiB GSO packet with a partial checksum passes whole and valid,
// never cut or checksummed here. Every frame waits the same D: one FIFO is the
// whole timer queue, behind one timerfd (poll's own timeout is late by 0.1% of
// itself). A frame that cannot be sent at once (tbf queue and socket buffer full,
// link down) is dropped, as a full switch port drops it. The thread runs at
// SCHED_FIFO 1 where allowed, as the kernel's forwarding preempts processes: under
// CFS, beside two busy loops on two cores, a 20 ms round trip measured 22 ms.
// Measured figures: docs/runtime.md §3.5.
//
// Thread-safety: construct and destroy from one thread; counters() may be called
// from any thread meanwhile.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "units/units.h"

namespace weft::netem {

struct DelayLineOptions {
  std::string netns;               // a name under /run/netns: the hub namespace
  std::vector<std::string> ports;  // the hub's ends of the links, in `netns`, up
  Seconds delay = 0;               // one-way, each frame; > 0
};

// What the switch has done so far.
struct DelayLineCounters {
  std::uint64_t frames = 0;   // frames read from a port
  std::uint64_t bytes = 0;    // their bytes, Ethernet headers included
  std::uint64_t dropped = 0;  // copies that could not be sent (full queue, link down)
};

class DelayLine {
 public:
  // Starts the switch thread and returns once it holds a socket on every port.
  // REQUIRES: options.delay > 0 and finite, !options.ports.empty() (THROWS
  // std::logic_error naming them otherwise).
  // THROWS std::runtime_error naming the namespace or port and the step that failed
  // (entering the namespace, opening or binding a socket); no thread is left then.
  explicit DelayLine(const DelayLineOptions& options);
  // Stops the thread and closes its sockets; frames still held are dropped.
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  DelayLineCounters counters() const;

  struct Shared;  // between the object and its thread (delay_line.cc)

 private:
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace weft::netem
