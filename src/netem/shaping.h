// How one direction of an emulated link is shaped: the token-bucket parameters for a
// rate, and the `tc` commands that install them on a device.
//
// Note [Token bucket parameters]
// Each direction of a link is a `tbf` qdisc on the egress of one end of a veth pair.
// tbf sends a packet when the bucket holds tokens (bytes) for it; tokens accrue at
// `rate` up to `burst`; packets wait in a queue of at most `limit` bytes.
//  - rate: the configured rate, counted on Ethernet frames (IP and TCP headers
//    included), as a real NIC's rate is. TCP over a 1500-byte MTU therefore delivers
//    about 1448/1514 = 95.6% of it as payload, as on real Ethernet; a 9000-byte MTU
//    delivers 99.3%. The planner's fitted all-reduce times (`weft profile
//    --network`) measure what applications get, so they absorb the difference;
//    its parameter-server transfers, costed from the bandwidth alone, are given
//    payload_rate by `weft bench`.
//  - burst = max(2 frames, rate × 1 ms). tbf cannot send a frame larger than the
//    bucket, so it must hold at least one; two let the next frame start as soon as
//    the previous one leaves. The 1 ms of tokens covers the time the dequeue timer
//    and the softirq take to run on a busy machine: with a smaller bucket the link
//    idles while tokens are lost to the cap, and at 1 Gbit and above the achieved
//    rate falls well short of the configured one. The price: a transfer of n bytes
//    can start with `burst` bytes at line speed, so its time is short by at most
//    burst/rate = 1 ms (under 0.4% for 1 MB at 10 Mbit).
//  - limit = max(rate × 50 ms, 1000 frames). The endpoint's egress plays its host's
//    transmit queue, which on Linux holds 1000 frames (txqueuelen): more than one
//    socket has in flight in weft's runs, so a sender's own link never drops its
//    packets (a drop costs a retransmission timeout no real host pays). 50 ms of
//    queue covers the higher rates, like a switch buffer. The hub's egress gets the
//    same queue; it fills only under incast.
//  - gso_max = the TCP payload of the whole frames the burst holds, at most Linux's
//    64 KiB; every interface of the network gets the smallest bucket's as its
//    gso_max_size. A sender's TCP hands its device packets of up to 64 KiB (GSO),
//    which the veth pair and the bridge carry whole; tbf cannot send a packet larger
//    than its bucket, so it cuts it into frames, and each frame then waits for a
//    dequeue timer and a softirq of its own. Packets that fit the bucket pass whole:
//    one timer per burst instead of one per frame. From ~560 Mbit at 1500 bytes the
//    bucket holds 64 KiB and nothing changes. Below ~48 Mbit the bucket holds fewer
//    than four frames and gso_max stays 64 KiB: TCP keeps header room under the cap,
//    so a cap of two frames makes packets of one, which turns GSO off. Why the cap:
//    cut into frames, the emulation costs the machine that runs it about three
//    times the CPU for the same bytes — a core taken from the workers while a
//    message is in flight, which a real NIC does not take.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "units/units.h"

namespace weft::netem {

struct TokenBucket {
  BytesPerSecond rate = 0;
  Bytes burst = 0;  // bucket size, bytes
  Bytes limit = 0;  // queue size, bytes
  Bytes gso_max = 0;  // largest packet a sender should build, bytes of TCP payload
};

// The parameters of Note [Token bucket parameters] for a link of `rate` whose
// interfaces have an MTU of `mtu` bytes. REQUIRES: rate > 0 and mtu > 52 (THROWS
// std::logic_error naming them otherwise).
TokenBucket token_bucket_for(BytesPerSecond rate, int mtu);

// What TCP delivers as payload over a link of `rate` counted on frames of an
// `mtu`-byte MTU (Note [Token bucket parameters]): each frame carries mtu − 52
// bytes of payload (IPv4, TCP and its timestamp option) in mtu + 14 bytes (the
// Ethernet header): 95.6% of the rate at 1500, 99.3% at 9000.
// REQUIRES: mtu > 52 (THROWS std::logic_error naming it otherwise).
BytesPerSecond payload_rate(BytesPerSecond rate, int mtu);

// `rate` in tc's syntax: whole bits per second, "10000000bit". A rate under half a
// bit per second comes out as "0bit", which tc rejects.
std::string tc_rate(BytesPerSecond rate);

// The `tc` command lines that shape the egress of `device` in namespace `netns`
// with `bucket`. (Delays are not a qdisc's: Note [A delaying switch], delay_line.h.)
std::vector<std::vector<std::string>> shaping_commands(const std::string& netns,
                                                       const std::string& device,
                                                       const TokenBucket& bucket);

}  // namespace weft::netem
