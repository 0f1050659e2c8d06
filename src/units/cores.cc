#include "units/cores.h"

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "units/units.h"

namespace weft {

std::vector<int> usable_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) {
    throw std::system_error(errno, std::generic_category(), "sched_getaffinity");
  }
  std::vector<int> cores;
  for (int core = 0; core < CPU_SETSIZE; ++core) {
    if (CPU_ISSET(core, &mask)) cores.push_back(core);
  }
  return cores;
}

std::vector<int> cores_of(const std::vector<int>& cores, int process, int processes) {
  if (cores.empty() || process < 0 || process >= processes) {
    throw std::invalid_argument(
        fmt::format("cores_of: process {} of {} on {} cores", process, processes, cores.size()));
  }
  const int c = static_cast<int>(cores.size());
  if (processes > c) return {cores[static_cast<size_t>(process % c)]};
  // Blocks of c / processes cores, the first c % processes of them one larger.
  const int size = c / processes, larger = c % processes;
  const int first = process * size + std::min(process, larger);
  const int count = size + (process < larger ? 1 : 0);
  return {cores.begin() + first, cores.begin() + first + count};
}

CoreSet core_set(const std::vector<int>& cores) {
  CoreSet set;
  CPU_ZERO(&set.mask);
  for (int core : cores) {
    if (core < 0 || core >= CPU_SETSIZE) throw std::invalid_argument(fmt::format("core_set: core {}", core));
    CPU_SET(core, &set.mask);
  }
  return set;
}

CorePlacement parse_core_placement(std::string_view text, std::string_view flag) {
  for (const CorePlacement p : {CorePlacement::kAuto, CorePlacement::kPinned, CorePlacement::kShared}) {
    if (text == to_string(p)) return p;
  }
  throw UsageError(fmt::format("{} {}: expected auto, pinned or shared", flag, text));
}

std::string_view to_string(CorePlacement placement) {
  switch (placement) {
    case CorePlacement::kAuto: return "auto";
    case CorePlacement::kPinned: return "pinned";
    case CorePlacement::kShared: return "shared";
  }
  return "?";
}

CoreSet pinning_for(int process, int processes, CorePlacement placement) {
  if (placement == CorePlacement::kShared) return {};
  const std::vector<int> cores = usable_cores();
  if (placement == CorePlacement::kAuto && processes > static_cast<int>(cores.size())) return {};
  return core_set(cores_of(cores, process, processes));
}

bool pin(const CoreSet& set) { return set.empty() || ::sched_setaffinity(0, sizeof set.mask, &set.mask) == 0; }

}  // namespace weft
