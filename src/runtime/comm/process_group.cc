#include "runtime/comm/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "cost/cluster.h"

namespace weft::runtime {
namespace {

std::chrono::milliseconds to_millis(Seconds s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

}  // namespace

std::chrono::steady_clock::time_point common_origin(c10d::Store& store, int rank, int world,
                                                    const std::string& machine,
                                                    std::chrono::steady_clock::time_point left) {
  const auto key = [](int r) { return "weft/origin/" + std::to_string(r); };
  const std::string mine = fmt::format("{} {}", left.time_since_epoch().count(), machine);
  store.set(key(rank), std::vector<std::uint8_t>(mine.begin(), mine.end()));
  auto latest = left;
  for (int r = 0; r < world; ++r) {
    const std::vector<std::uint8_t> theirs = store.get(key(r));
    const std::string text(theirs.begin(), theirs.end());
    const size_t space = text.find(' ');
    if (machine.empty() || space == std::string::npos || text.substr(space + 1) != machine) return left;
    const std::chrono::steady_clock::duration since_epoch(std::stoll(text.substr(0, space)));
    latest = std::max(latest, std::chrono::steady_clock::time_point(since_epoch));
  }
  return latest;
}

std::chrono::steady_clock::time_point common_origin(const Group& group, int ranks) {
  const auto left = std::chrono::steady_clock::now();
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return common_origin(*group.store, group.rank, ranks, boot, left);
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), "9", &hints, &found); error != 0) {
    throw std::runtime_error(fmt::format("MASTER_ADDR {}: cannot resolve it: {}", host, ::gai_strerror(error)));
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  // Connecting a UDP socket sends nothing; it only asks the kernel for a route.
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::freeaddrinfo(found);
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error(fmt::format("MASTER_ADDR {}: no route to it from this host", host));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int world, Seconds timeout, const std::string& hostname,
                                                       int threads) {
  auto options = c10d::ProcessGroupGloo::Options::create(to_millis(timeout));
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  options->devices.push_back(interface != nullptr && interface[0] != '\0'
                                 ? c10d::ProcessGroupGloo::createDeviceForInterface(interface)
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
  options->threads = threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

Group connect(const WorkerEnv& env, Seconds timeout) {
  Group group{.rank = env.rank, .world = env.world, .timeout = timeout};
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0;
    options.numWorkers = static_cast<std::size_t>(env.world);
    options.waitWorkers = true;
    options.timeout = to_millis(timeout);
    group.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "rank {}: rendezvous at MASTER_ADDR:MASTER_PORT = {} failed within {} ({} workers expected): {}", env.rank,
        where, format_duration(timeout), env.world, e.what()));
  }
  try {
    group.address = local_address_towards(env.master_addr);
    group.collectives = make_gloo_group(group.store, env.rank, env.world, timeout, group.address);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("rank {}: connecting Gloo to the {} other workers (store at {}) failed "
                                         "within {}: {}",
                                         env.rank, env.world - 1, where, format_duration(timeout), e.what()));
  }
  return group;
}

c10::intrusive_ptr<c10d::ProcessGroup> open_subgroup(const Group& group, const std::string& name, int threads) {
  return make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("weft/" + name, group.store), group.rank,
                         group.world, group.timeout, group.address, threads);
}

Summing start_sum(c10d::ProcessGroup& group, const torch::Tensor& buffer, Bytes gather_below) {
  const Bytes bytes = static_cast<Bytes>(buffer.numel()) * static_cast<Bytes>(buffer.element_size());
  if (!summed_by_allgather(bytes, gather_below)) {
    std::vector<torch::Tensor> tensors{buffer};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    return {.done = group.allreduce(tensors, opts)->getFuture(), .result = buffer};
  }
  // One row per rank, filled by Gloo; sum_of adds them up.
  torch::Tensor rows = torch::empty({group.getSize(), buffer.numel()}, buffer.options());
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < group.getSize(); ++r) outputs[0].push_back(rows[r]);
  std::vector<torch::Tensor> inputs{buffer};
  return {.done = group.allgather(outputs, inputs)->getFuture(), .result = rows};
}

torch::Tensor sum_of(const torch::Tensor& result) {
  if (result.dim() == 1) return result;
  torch::Tensor sum = result[0].clone();
  for (std::int64_t r = 1; r < result.size(0); ++r) sum.add_(result[r]);
  return sum;
}

WorkWaiter::WorkWaiter() : thread_([this] { loop(); }) {}

WorkWaiter::~WorkWaiter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (auto& pending : queue_) {
      for (auto& work : pending.works) work->abort();
    }
  }
  changed_.notify_one();
  thread_.join();
}

void WorkWaiter::add(std::vector<c10::intrusive_ptr<c10d::Work>> works, c10::intrusive_ptr<c10::ivalue::Future> done) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(works), std::move(done)});
  }
  changed_.notify_one();
}

void WorkWaiter::loop() {
  for (;;) {
    Pending pending;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      pending = queue_.front();  // stays queued, so that the destructor can abort it
    }
    try {
      for (auto& work : pending.works) {
        if (!work->wait()) throw std::runtime_error("the transfer was aborted");
      }
      pending.done->markCompleted(c10::IValue());
    } catch (...) {
      pending.done->setError(std::current_exception());
    }
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    queue_.pop_front();
  }
}

std::string decided_by_rank0(const Group& group, const std::string& key,
                             const std::function<std::string()>& decide, std::string_view failed) {
  constexpr char kDecided = 'd', kFailed = 'f';  // the first byte says which
  const auto publish = [&](char tag, const std::string& text) {
    std::vector<std::uint8_t> bytes{static_cast<std::uint8_t>(tag)};
    bytes.insert(bytes.end(), text.begin(), text.end());
    group.store->set(key, bytes);
  };
  if (group.rank == 0) {
    try {
      publish(kDecided, decide());
    } catch (const std::exception& e) {
      publish(kFailed, e.what());
      throw;
    }
  }
  const std::vector<std::uint8_t> bytes = group.store->get(key);
  const std::string text(bytes.begin() + (bytes.empty() ? 0 : 1), bytes.end());
  if (bytes.empty() || bytes.front() != kDecided) {
    throw UsageError(failed.empty() ? text : fmt::format("{}: {}", failed, text));
  }
  return text;
}

}  // namespace weft::runtime
