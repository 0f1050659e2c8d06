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
// never cut or checksummed here. Its out port is chosen when it is read. The held
// frames are one heap by due time (with sites they differ: Note [Emulated sites]),
// behind one timerfd (poll's own timeout is late by 0.1% of itself). A frame that cannot be sent at once (tbf queue and socket buffer full,
// link down) is dropped, as a full switch port drops it. The thread runs at
// SCHED_FIFO 1 where allowed, as the kernel's forwarding preempts processes: under
// CFS, beside two busy loops on two cores, a 20 ms round trip measured 22 ms.
// Measured figures: docs/runtime.md §3.5.
//
// Note [Emulated sites]
// Rule: with sites (netem.h's NetemOptions::sites) each port belongs to a site, and
// a frame's due time depends on the pair of sites it crosses. Inside a site it is
// held the site's latency (0: sent at once). Between two sites it crosses that
// ordered pair's WAN link: a serialisation clock shared by every flow from the one
// site to the other, which sends the frame's wire bytes (GSO packets counted as the
// frames they become, as tbf counts them) at that link's rate behind what it
// already holds, then holds it that link's latency. Each ordered pair has its own
// rate and latency (the topology's `wan`, or the pair's own: cost/topology.h's
// between()); a round trip between two sites is one way on each pair's link.
// A frame that would find more than the link's queue bound waiting ahead of it is
// dropped (drop-tail), as a real router drops it, so TCP meets a bottleneck rather
// than a delay without end. The queue bound is max(one round trip between the
// pair's sites at the link's rate, 10 ms of its rate, one 64 KiB GSO packet on the
// wire): reno fills a link whose drop-tail queue holds
// one bandwidth-delay product, and a smaller queue idles the link after each
// halving. Measured on 2x2 sites, 20 Mbit, 40 ms round trip (BDP 100 KB), one
// transfer: a queue of 12.5 KB gave 15.7 Mbit/s of the 19.1 TCP can carry, 25 KB
// 16.3, 50 KB 17.8, 100 KB 19.1, 137 KB 19.1. The 10 ms floor keeps a short WAN's
// queue above TCP's bursts, and the largest packet a port hands over must fit or
// it is never sent. A frame between sites waits its pair's link's latency only (a
// site's own latency is inside it). With uniform links (no sites) every port is in one
// site whose latency is D: the rule above is then Note [A delaying switch]'s.
// Why here: the hub is where frames of every pair meet, so a shared WAN link is one
// clock per pair in one thread, with no qdisc the kernel lacks. With different due
// times the held frames form a heap ordered by (due, arrival); the frames of one
// pair of sites (and of one pair of ports) keep their order, as their due times
// grow with their arrivals. Measured: docs/runtime.md §3.5.
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

#include "cost/topology.h"
#include "units/units.h"

namespace weft::netem {

struct DelayLineOptions {
  std::string netns;               // a name under /run/netns: the hub namespace
  std::vector<std::string> ports;  // the hub's ends of the links, in `netns`, up
  Seconds delay = 0;               // one-way, each frame; > 0 unless sites are given
  // Note [Emulated sites]. Empty: every port in one site whose latency is `delay`.
  // Else one entry per port: its site, 0..site_latency.size()-1.
  std::vector<int> site_of_port;
  std::vector<Seconds> site_latency;  // one-way inside each site; >= 0
  // With 2+ sites, S = site_latency.size(): the link from site a to site b at
  // [a * S + b] (a != b; the diagonal is not used), each rate > 0, latency >= 0.
  std::vector<Wan> wan;
};

// The queue bound of a WAN link (Note [Emulated sites]), bytes of frames, for a
// link of `rate` between sites whose round trip (one way on each pair's link) is
// `round_trip`. REQUIRES: rate > 0.
Bytes wan_queue_limit(BytesPerSecond rate, Seconds round_trip);

// What the switch has done so far.
struct DelayLineCounters {
  std::uint64_t frames = 0;   // frames read from a port
  std::uint64_t bytes = 0;    // their bytes, Ethernet headers included
  std::uint64_t dropped = 0;  // copies that could not be sent (full queue, link down)
  std::uint64_t wan_frames = 0;   // copies that crossed a WAN link (Note [Emulated sites])
  std::uint64_t wan_dropped = 0;  // copies a WAN link's full queue dropped
};

class DelayLine {
 public:
  // Starts the switch thread and returns once it holds a socket on every port.
  // REQUIRES: !options.ports.empty(); without sites, options.delay > 0 and finite;
  // with sites, one per port, each in range, latencies >= 0 and finite, and with 2+
  // sites an S x S `wan` whose rates off the diagonal are finite and > 0 (THROWS
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
