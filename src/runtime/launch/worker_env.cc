#include "runtime/launch/worker_env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "units/units.h"

namespace weft::runtime {
namespace {

const char* get(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' ? value : nullptr;
}

std::string required(const char* name, std::string_view meaning) {
  const char* value = get(name);
  if (value == nullptr) {
    throw UsageError(fmt::format(
        "environment variable {} is not set: expected {} (workers need MASTER_ADDR, MASTER_PORT, "
        "RANK and WORLD_SIZE as torchrun sets them, or run `weft train --nproc K` to start K local "
        "workers)",
        name, meaning));
  }
  return value;
}

int parse_int(const char* name, const std::string& text, int min, int max, std::string_view meaning) {
  int value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end != last || value < min || value > max) {
    throw UsageError(fmt::format("environment variable {}='{}': expected {}", name, text, meaning));
  }
  return value;
}

}  // namespace

bool has_worker_env() {
  return get("MASTER_ADDR") || get("MASTER_PORT") || get("RANK") || get("WORLD_SIZE");
}

WorkerEnv read_worker_env() {
  constexpr int kMaxWorld = 1 << 20;
  WorkerEnv env;
  env.master_addr = required("MASTER_ADDR", "the host name or address of rank 0");
  env.master_port = parse_int("MASTER_PORT", required("MASTER_PORT", "a TCP port 1..65535"), 1, 65535,
                              "a TCP port 1..65535");
  env.world = parse_int("WORLD_SIZE", required("WORLD_SIZE", "the number of workers, >= 1"), 1, kMaxWorld,
                        "the number of workers, an integer >= 1");
  env.rank = parse_int("RANK", required("RANK", "this worker's rank 0..WORLD_SIZE-1"), 0, kMaxWorld,
                       "this worker's rank, an integer >= 0");
  if (env.rank >= env.world) {
    throw UsageError(fmt::format("environment variable RANK={} is not below WORLD_SIZE={}: ranks are "
                                 "0..WORLD_SIZE-1",
                                 env.rank, env.world));
  }
  if (const char* local = get("LOCAL_RANK")) {
    env.local_rank = parse_int("LOCAL_RANK", local, 0, kMaxWorld, "this worker's rank on its host, >= 0");
  } else {
    env.local_rank = env.rank;
  }
  return env;
}

std::optional<int> local_world_size() {
  const char* local = get("LOCAL_WORLD_SIZE");
  if (local == nullptr) return std::nullopt;
  return parse_int("LOCAL_WORLD_SIZE", local, 1, 1 << 20, "the number of workers on this host, an integer >= 1");
}

WorkerEnv local_worker_env(int port, int rank, int world) {
  return {.master_addr = "127.0.0.1", .master_port = port, .rank = rank, .world = world, .local_rank = rank};
}

}  // namespace weft::runtime
