#include "netem/delay_line.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <future>
#include <stdexcept>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

namespace weft::netem {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Sent when due, not after]
// A woken thread runs tens of microseconds after the event that woke it, so a
// frame held "D from when it was read, sent once due" is late by two wake-ups
// on every crossing: 50-100 us on a 1 ms round trip, over the 10% asked. So a
// frame's D counts from when the kernel received it (SO_TIMESTAMPNS), and the
// switch measures how late its timer's wake-ups come (a moving average of the
// last few, at most kMaxLateness), arms the timer that much early and sends every
// frame due within it: frames leave when due on average.
constexpr Clock::duration kMaxLateness = std::chrono::microseconds(500);

// struct virtio_net_hdr (<linux/virtio_net.h>, which C++ cannot include: a field is
// called `class`): flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
constexpr std::size_t kVnetHeader = 10;
constexpr std::size_t kMacBytes = 6;
// The largest packet a port can hand over: a 64 KiB GSO packet and its headers.
constexpr std::size_t kMaxPacket = 128 * 1024;
// Each socket's buffers, forced past the sysctl caps (root): the receive side holds
// what arrives while the thread is away, the send side what waits in the port's tbf
// queue (Note [Token bucket parameters]: up to 50 ms at the port's rate).
constexpr int kSocketBuffer = 64 << 20;
// Frames read from one port before the others get a turn.
constexpr int kReadBatch = 64;
// What the switch holds at most: 1 Gbit for 2 s. More is dropped.
constexpr std::size_t kMaxHeldBytes = 256u << 20;

std::runtime_error system_failure(const std::string& what) {
  return std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

struct Held {
  Clock::time_point due;
  std::uint64_t sequence = 0;  // arrival order: equal due times leave in it
  int out_port = 0;
  std::vector<unsigned char> packet;  // virtio_net_hdr, then the Ethernet frame
};

// The heap's order: the earliest due on top (Note [Emulated sites]).
bool later(const Held& a, const Held& b) {
  return a.due != b.due ? a.due > b.due : a.sequence > b.sequence;
}

// The bytes a packet takes on the wire (Note [Emulated sites]): a GSO packet is
// cut into frames that each repeat its Ethernet, IP and TCP headers, as tbf counts
// it (qdisc_pkt_len). `packet` starts with the virtio_net_hdr.
std::size_t wire_bytes(const unsigned char* packet, std::size_t size) {
  const std::size_t frame = size - kVnetHeader;
  const unsigned char gso_type = packet[1];
  std::uint16_t gso_size = 0;
  std::memcpy(&gso_size, packet + 4, sizeof gso_size);  // little-endian: the host's, on x86 and arm64
  if (gso_type == 0 || gso_size == 0) return frame;
  const unsigned char* eth = packet + kVnetHeader;
  if (frame < ETH_HLEN + 20 || eth[12] != 0x08 || eth[13] != 0x00) return frame;  // IPv4 only
  const std::size_t ip = static_cast<std::size_t>(eth[ETH_HLEN] & 0x0f) * 4;
  if (frame < ETH_HLEN + ip + 20) return frame;
  const std::size_t tcp = static_cast<std::size_t>(eth[ETH_HLEN + ip + 12] >> 4) * 4;
  const std::size_t headers = ETH_HLEN + ip + tcp;
  if (frame <= headers) return frame;
  const std::size_t segments = (frame - headers + gso_size - 1) / gso_size;
  return frame + (segments - 1) * headers;
}

std::uint64_t mac_at(const unsigned char* bytes) {
  std::uint64_t mac = 0;
  for (std::size_t i = 0; i < kMacBytes; ++i) mac = (mac << 8) | bytes[i];
  return mac;
}

// Opens the socket for one port of the namespace the calling thread is in.
int open_port(const std::string& port) {
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw system_failure("socket(AF_PACKET)");
  try {
    const int on = 1;
    const auto set = [&](int level, int name, int value, const char* what) {
      if (::setsockopt(fd, level, name, &value, sizeof value) != 0) {
        throw system_failure(fmt::format("setsockopt({}) on port {}", what, port));
      }
    };
    set(SOL_PACKET, PACKET_VNET_HDR, on, "PACKET_VNET_HDR");
    set(SOL_SOCKET, SO_TIMESTAMPNS, on, "SO_TIMESTAMPNS");  // Note [Sent when due, not after]
    set(SOL_PACKET, PACKET_IGNORE_OUTGOING, on, "PACKET_IGNORE_OUTGOING");  // not our own sends
    set(SOL_SOCKET, SO_RCVBUFFORCE, kSocketBuffer, "SO_RCVBUFFORCE");
    set(SOL_SOCKET, SO_SNDBUFFORCE, kSocketBuffer, "SO_SNDBUFFORCE");
    const unsigned index = ::if_nametoindex(port.c_str());
    if (index == 0) throw system_failure(fmt::format("port {}", port));
    // Bound with its protocol, so that it hears this port only, from here on.
    sockaddr_ll address{};
    address.sll_family = AF_PACKET;
    address.sll_protocol = htons(ETH_P_ALL);
    address.sll_ifindex = static_cast<int>(index);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw system_failure(fmt::format("binding a packet socket to port {}", port));
    }
    packet_mreq promiscuous{};
    promiscuous.mr_ifindex = static_cast<int>(index);
    promiscuous.mr_type = PACKET_MR_PROMISC;
    if (::setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promiscuous, sizeof promiscuous) != 0) {
      throw system_failure(fmt::format("setting port {} promiscuous", port));
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

}  // namespace

struct DelayLine::Shared {
  DelayLineOptions options;
  int stop_fd = -1;  // an eventfd: readable when the thread must end
  std::atomic<std::uint64_t> frames{0};
  std::atomic<std::uint64_t> bytes{0};
  std::atomic<std::uint64_t> dropped{0};
  std::atomic<std::uint64_t> wan_frames{0};
  std::atomic<std::uint64_t> wan_dropped{0};
};

namespace {

// The switch proper (Note [A delaying switch], Note [Emulated sites]): runs until
// `stop_fd` is readable.
class Switch {
 public:
  // REQUIRES: timer_fd is a CLOCK_MONOTONIC timerfd (steady_clock's clock);
  // options validated as DelayLine's constructor does.
  Switch(std::vector<int> ports, int timer_fd, int stop_fd, const DelayLineOptions& options,
         DelayLine::Shared& counters)
      : ports_(std::move(ports)), timer_fd_(timer_fd), counters_(counters) {
    for (const int fd : ports_) polled_.push_back({.fd = fd, .events = POLLIN, .revents = 0});
    polled_.push_back({.fd = timer_fd, .events = POLLIN, .revents = 0});
    polled_.push_back({.fd = stop_fd, .events = POLLIN, .revents = 0});
    const auto duration = [](Seconds s) {
      return std::chrono::round<Clock::duration>(std::chrono::duration<double>(s));
    };
    if (options.site_of_port.empty()) {
      site_of_port_.assign(ports_.size(), 0);
      site_latency_ = {duration(options.delay)};
    } else {
      site_of_port_ = options.site_of_port;
      for (const Seconds latency : options.site_latency) site_latency_.push_back(duration(latency));
    }
    const std::size_t sites = site_latency_.size();
    if (sites > 1) {
      wan_.resize(sites * sites);
      for (std::size_t a = 0; a < sites; ++a) {
        for (std::size_t b = 0; b < sites; ++b) {
          if (a == b) continue;
          const Wan& link = options.wan[a * sites + b];
          const Seconds round_trip = link.latency + options.wan[b * sites + a].latency;
          wan_[a * sites + b] = {.seconds_per_byte = 1 / link.bandwidth,
                                 .latency = duration(link.latency),
                                 .limit = static_cast<double>(wan_queue_limit(link.bandwidth, round_trip))};
        }
      }
    }
  }

  void run() {
    std::vector<unsigned char> buffer(kMaxPacket);
    Clock::time_point armed{};  // when the timer goes off; {}: disarmed
    while (true) {
      // A frame due before the next wake-up could come is sent now (Note [Sent
      // when due, not after]).
      const Clock::time_point horizon = Clock::now() + lateness_;
      while (!held_.empty() && held_.front().due <= horizon) {
        std::pop_heap(held_.begin(), held_.end(), later);
        send(held_.back());
        held_bytes_ -= held_.back().packet.size();
        held_.pop_back();
      }
      // A timerfd, not poll's timeout: poll adds 0.1% of the timeout as slack.
      const Clock::time_point due = held_.empty() ? Clock::time_point{} : held_.front().due;
      if (due != armed) {
        const auto ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>((due - lateness_).time_since_epoch()).count();
        itimerspec at{.it_interval = {}, .it_value = {.tv_sec = static_cast<time_t>(ns / 1'000'000'000),
                                                      .tv_nsec = static_cast<long>(ns % 1'000'000'000)}};
        ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &at, nullptr);
        armed = due;
      }
      if (::ppoll(polled_.data(), polled_.size(), nullptr, nullptr) < 0) {
        if (errno == EINTR) continue;
        return;  // cannot happen with valid descriptors; the links then carry nothing
      }
      if (polled_.back().revents != 0) return;
      if (polled_[ports_.size()].revents != 0) {
        if (armed != Clock::time_point{}) {
          const Clock::duration late = std::clamp(Clock::now() - (armed - lateness_), Clock::duration::zero(),
                                                  kMaxLateness);
          lateness_ += (late - lateness_) / 8;
        }
        std::uint64_t expirations = 0;
        if (::read(timer_fd_, &expirations, sizeof expirations) < 0) {
          // Re-armed meanwhile: nothing to read.
        }
        armed = {};
      }
      for (std::size_t port = 0; port < ports_.size(); ++port) {
        if (polled_[port].revents != 0) read_port(static_cast<int>(port), buffer);
      }
    }
  }

 private:
  void read_port(int port, std::vector<unsigned char>& buffer) {
    for (int i = 0; i < kReadBatch; ++i) {
      // A link taken down reports ENETDOWN once: read, and carry on.
      iovec data{.iov_base = buffer.data(), .iov_len = buffer.size()};
      alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(timespec))];
      msghdr message{.msg_name = nullptr, .msg_namelen = 0, .msg_iov = &data, .msg_iovlen = 1,
                     .msg_control = control, .msg_controllen = sizeof control, .msg_flags = 0};
      const ssize_t n = ::recvmsg(ports_[static_cast<std::size_t>(port)], &message, MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) return;
      const Clock::time_point arrived = arrival(message);
      const auto size = static_cast<std::size_t>(n);
      counters_.frames.fetch_add(1, std::memory_order_relaxed);
      if (size < kVnetHeader + ETH_HLEN || size > buffer.size()) {
        counters_.dropped.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      counters_.bytes.fetch_add(size - kVnetHeader, std::memory_order_relaxed);
      const unsigned char* frame = buffer.data() + kVnetHeader;
      if ((frame[kMacBytes] & 1) == 0) mac_table_[mac_at(frame + kMacBytes)] = port;  // its source
      // Where it goes is decided now, as its due time depends on it.
      if ((frame[0] & 1) == 0) {  // unicast
        const auto learnt = mac_table_.find(mac_at(frame));
        if (learnt != mac_table_.end()) {
          if (learnt->second != port) hold(port, learnt->second, buffer.data(), size, arrived);
          continue;
        }
      }
      for (int out = 0; out < static_cast<int>(ports_.size()); ++out) {
        if (out != port) hold(port, out, buffer.data(), size, arrived);
      }
    }
  }

  // Queues one copy of a packet from port `in` to port `out`, due as Note
  // [Emulated sites] says, or drops it.
  void hold(int in, int out, const unsigned char* packet, std::size_t size, Clock::time_point arrived) {
    if (held_bytes_ + size > kMaxHeldBytes) {
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const int from = site_of_port_[static_cast<std::size_t>(in)];
    const int to = site_of_port_[static_cast<std::size_t>(out)];
    Clock::time_point due;
    if (from == to) {
      due = arrived + site_latency_[static_cast<std::size_t>(from)];
    } else {
      PairLink& link = wan_[static_cast<std::size_t>(from) * site_latency_.size() + static_cast<std::size_t>(to)];
      const double wire = static_cast<double>(wire_bytes(packet, size));
      // What the link still holds ahead of this frame, in bytes.
      const double queued = std::max(0.0, std::chrono::duration<double>(link.free - arrived).count()) /
                            link.seconds_per_byte;
      if (queued + wire > link.limit) {
        counters_.wan_dropped.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      link.free = std::max(link.free, arrived) +
                  std::chrono::round<Clock::duration>(std::chrono::duration<double>(wire * link.seconds_per_byte));
      due = link.free + link.latency;
      counters_.wan_frames.fetch_add(1, std::memory_order_relaxed);
    }
    held_.push_back({.due = due, .sequence = sequence_++, .out_port = out, .packet = {packet, packet + size}});
    std::push_heap(held_.begin(), held_.end(), later);
    held_bytes_ += size;
  }

  // When the kernel received the frame (its SO_TIMESTAMPNS, on the real-time
  // clock), on the steady clock; now if it gave none.
  static Clock::time_point arrival(msghdr& message) {
    const Clock::time_point now = Clock::now();
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
      timespec stamp{};
      std::memcpy(&stamp, CMSG_DATA(c), sizeof stamp);
      const auto since = std::chrono::system_clock::now().time_since_epoch() -
                         (std::chrono::seconds(stamp.tv_sec) + std::chrono::nanoseconds(stamp.tv_nsec));
      return now - std::clamp(std::chrono::duration_cast<Clock::duration>(since), Clock::duration::zero(),
                              kMaxLateness);
    }
    return now;
  }

  void send(const Held& held) {
    if (::send(ports_[static_cast<std::size_t>(held.out_port)], held.packet.data(), held.packet.size(),
               MSG_DONTWAIT) < 0) {
      counters_.dropped.fetch_add(1, std::memory_order_relaxed);
    }
  }

  std::vector<int> ports_;
  int timer_fd_;
  std::vector<pollfd> polled_;  // the ports, the timer, then the stop eventfd
  std::vector<int> site_of_port_;
  std::vector<Clock::duration> site_latency_;
  // One ordered pair of sites' WAN link (Note [Emulated sites]).
  struct PairLink {
    double seconds_per_byte = 0;
    Clock::duration latency{};
    double limit = 0;       // the queue bound, bytes
    Clock::time_point free;  // when the link has sent all it holds
  };
  std::vector<PairLink> wan_;  // [from * sites + to]; the diagonal unused
  std::vector<Held> held_;  // a heap by `later`
  std::uint64_t sequence_ = 0;
  Clock::duration lateness_{};  // how late the timer's wake-ups come, a moving average
  std::size_t held_bytes_ = 0;
  std::unordered_map<std::uint64_t, int> mac_table_;
  DelayLine::Shared& counters_;
};

// The thread's body: enters the hub, opens the ports, says it is ready, switches.
void run_switch(const std::shared_ptr<DelayLine::Shared>& shared, std::promise<void>& ready) {
  std::vector<int> ports;
  const int timer = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  try {
    if (timer < 0) throw system_failure("timerfd_create");
    ::pthread_setname_np(::pthread_self(), "weft-delay");
    // Note [A delaying switch]: ahead of every process, as the kernel's own
    // forwarding is; best effort, since a container may deny real-time priority.
    const sched_param lowest_real_time{.sched_priority = 1};
    ::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &lowest_real_time);
    const std::string path = "/run/netns/" + shared->options.netns;
    const int netns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (netns < 0) throw system_failure(fmt::format("opening network namespace {}", path));
    const int entered = ::setns(netns, CLONE_NEWNET);  // this thread only
    ::close(netns);
    if (entered != 0) throw system_failure(fmt::format("entering network namespace {}", shared->options.netns));
    for (const std::string& port : shared->options.ports) ports.push_back(open_port(port));
  } catch (...) {
    for (const int fd : ports) ::close(fd);
    if (timer >= 0) ::close(timer);
    ready.set_exception(std::current_exception());
    return;
  }
  ready.set_value();
  Switch(ports, timer, shared->stop_fd, shared->options, *shared).run();
  for (const int fd : ports) ::close(fd);
  ::close(timer);
}

}  // namespace

Bytes wan_queue_limit(BytesPerSecond rate, Seconds round_trip) {
  if (!(rate > 0)) throw std::logic_error(fmt::format("wan_queue_limit: rate {} B/s must be > 0", rate));
  // Note [Emulated sites]: a round trip's bytes, 10 ms of them, one GSO packet.
  constexpr Seconds kFloor = 0.010;
  // 64 KiB of payload cut into 1500-byte frames, each with its 66 bytes of headers.
  constexpr double kGsoPacket = 64 * 1024 + 46 * 66;
  return static_cast<Bytes>(std::ceil(std::max({rate * round_trip, rate * kFloor, kGsoPacket})));
}

DelayLine::DelayLine(const DelayLineOptions& options) : shared_(std::make_shared<Shared>()) {
  const auto finite_non_negative = [](Seconds s) { return s >= 0 && std::isfinite(s); };
  if (options.ports.empty()) throw std::logic_error("DelayLine: at least one port is needed");
  if (options.site_of_port.empty()) {
    if (!(options.delay > 0) || !std::isfinite(options.delay)) {
      throw std::logic_error(fmt::format("DelayLine: delay {} s must be > 0 and finite", options.delay));
    }
  } else {
    const auto sites = static_cast<int>(options.site_latency.size());
    if (options.site_of_port.size() != options.ports.size() ||
        std::any_of(options.site_of_port.begin(), options.site_of_port.end(),
                    [&](int s) { return s < 0 || s >= sites; }) ||
        !std::all_of(options.site_latency.begin(), options.site_latency.end(), finite_non_negative)) {
      throw std::logic_error(fmt::format("DelayLine: {} sites for {} ports ({} given): each port needs a site, "
                                         "latencies >= 0",
                                         sites, options.ports.size(), options.site_of_port.size()));
    }
    if (sites > 1) {
      const auto each = static_cast<std::size_t>(sites);
      const std::size_t pairs = each * each;
      if (options.wan.size() != pairs) {
        throw std::logic_error(fmt::format("DelayLine: {} WAN links for {} sites; need {} x {}", options.wan.size(),
                                           sites, sites, sites));
      }
      for (std::size_t k = 0; k < pairs; ++k) {
        const Wan& link = options.wan[k];
        if (k / each == k % each) continue;
        if (!(link.bandwidth > 0) || !std::isfinite(link.bandwidth) || !finite_non_negative(link.latency)) {
          throw std::logic_error(fmt::format("DelayLine: WAN link from site {} to {}: {} B/s, {} s; need a rate > 0, "
                                             "a latency >= 0",
                                             k / each, k % each, link.bandwidth, link.latency));
        }
      }
    }
  }
  shared_->options = options;
  shared_->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (shared_->stop_fd < 0) throw system_failure("eventfd");
  std::promise<void> ready;
  std::future<void> started = ready.get_future();
  // The promise moves into the thread, which outlives its last use of it.
  thread_ = std::thread([shared = shared_, ready = std::move(ready)]() mutable { run_switch(shared, ready); });
  try {
    started.get();
  } catch (...) {
    thread_.join();
    ::close(shared_->stop_fd);
    throw;
  }
}

DelayLine::~DelayLine() {
  const std::uint64_t one = 1;
  if (::write(shared_->stop_fd, &one, sizeof one) != sizeof one) {
    // An eventfd write fails only on overflow, which one write cannot cause.
  }
  thread_.join();
  ::close(shared_->stop_fd);
}

DelayLineCounters DelayLine::counters() const {
  return {.frames = shared_->frames.load(std::memory_order_relaxed),
          .bytes = shared_->bytes.load(std::memory_order_relaxed),
          .dropped = shared_->dropped.load(std::memory_order_relaxed),
          .wan_frames = shared_->wan_frames.load(std::memory_order_relaxed),
          .wan_dropped = shared_->wan_dropped.load(std::memory_order_relaxed)};
}

}  // namespace weft::netem
