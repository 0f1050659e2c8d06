#include "netem/netns.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "netem/process.h"

namespace weft::netem {
namespace {

constexpr std::string_view kNamePrefix = "weft";
constexpr const char* kNetnsDir = "/run/netns";

// Capability numbers from <linux/capability.h>.
constexpr int kCapNetAdmin = 12;
constexpr int kCapSysAdmin = 21;

bool process_exists(pid_t pid) {
  // EPERM: it exists but belongs to someone else.
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

std::string namespace_prefix(pid_t pid) { return fmt::format("{}{}", kNamePrefix, pid); }

std::optional<pid_t> namespace_owner(std::string_view name) {
  if (!name.starts_with(kNamePrefix)) return std::nullopt;
  name.remove_prefix(kNamePrefix.size());
  pid_t pid = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (error != std::errc() || end == name.data() || pid <= 0) return std::nullopt;
  // The kind letter must follow the pid (Note [Namespace names]).
  if (end == name.data() + name.size() || *end < 'a' || *end > 'z') return std::nullopt;
  return pid;
}

std::vector<std::string> list_namespaces() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsDir, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> namespaces_of(pid_t pid) {
  std::vector<std::string> names = list_namespaces();
  std::erase_if(names, [pid](const std::string& name) { return namespace_owner(name) != pid; });
  return names;
}

void add_namespace(const std::string& name) { run_checked({"ip", "netns", "add", name}); }

void delete_namespace(const std::string& name) {
  const std::vector<std::string> argv = {"ip", "netns", "delete", name};
  CommandResult result = run_command(argv);
  if (result.succeeded()) return;
  std::error_code error;
  if (!std::filesystem::exists(std::filesystem::path(kNetnsDir) / name, error)) return;
  run_checked(argv);  // reports the failure
}

std::vector<std::string> sweep_stale_namespaces() {
  std::vector<std::string> swept;
  for (const std::string& name : list_namespaces()) {
    const std::optional<pid_t> owner = namespace_owner(name);
    if (!owner || *owner == ::getpid() || process_exists(*owner)) continue;
    delete_namespace(name);
    swept.push_back(name);
  }
  return swept;
}

bool has_network_privileges() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("CapEff:")) continue;
    std::uint64_t mask = 0;
    const std::string_view hex = std::string_view(line).substr(line.find_first_not_of(" \t", 7));
    std::from_chars(hex.data(), hex.data() + hex.size(), mask, 16);
    const std::uint64_t needed = (std::uint64_t{1} << kCapNetAdmin) | (std::uint64_t{1} << kCapSysAdmin);
    return (mask & needed) == needed;
  }
  return ::geteuid() == 0;  // no /proc: fall back to the classic rule
}

}  // namespace weft::netem
