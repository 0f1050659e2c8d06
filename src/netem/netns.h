// Named network namespaces (the files under /run/netns that `ip netns` manages):
// how weft names the ones it makes, and how it finds and removes the ones a killed
// run left behind.
//
// Note [Namespace names]
// Every namespace weft makes is called `weft<pid><kind>...`, where <pid> is the
// process that made it and <kind> is a letter: `h` the hub holding the bridge,
// `w<i>` worker i, `s<j>` server j. The letter ends the pid, so `weft12w0` and
// `weft123w0` are never confused. Runs in parallel (different pids) never collide,
// and a namespace whose maker no longer exists is known to be stale: its maker was
// SIGKILLed before it could clean up. Pids are those of the pid namespace weft runs
// in; runs in different pid namespaces must not share /run/netns.
//
// Thread-safety: the functions are reentrant; concurrent sweeps may race to delete
// the same namespace, and the loser just finds it gone.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::netem {

// "weft<pid>": the start of every namespace name made by process `pid`.
std::string namespace_prefix(pid_t pid);

// The pid that made namespace `name` under Note [Namespace names], or nullopt if the
// name does not follow it.
std::optional<pid_t> namespace_owner(std::string_view name);

// The names under /run/netns, sorted; empty if the directory does not exist.
std::vector<std::string> list_namespaces();

// The namespaces that process `pid` made (per Note [Namespace names]), sorted.
std::vector<std::string> namespaces_of(pid_t pid);

// Runs `ip netns add name`. THROWS std::runtime_error with ip's message on failure
// (for example when the name exists).
void add_namespace(const std::string& name);

// Runs `ip netns del name`; a namespace that is already gone is not an error.
// THROWS std::runtime_error with ip's message on any other failure.
void delete_namespace(const std::string& name);

// Deletes every namespace of Note [Namespace names] whose maker is not a running
// process, and returns their names. The calling process's own namespaces are kept.
// THROWS std::runtime_error if one cannot be deleted.
std::vector<std::string> sweep_stale_namespaces();

// Whether this process may create namespaces and shape links: `ip netns add` and
// setns need CAP_SYS_ADMIN, `ip link` and `tc` need CAP_NET_ADMIN (root has both).
bool has_network_privileges();

}  // namespace weft::netem
