// Reading whole files within a bound, and writing a file so that nothing
// half-written is ever left behind.
//
// Inputs (Note [Bounded reads], files.cc): every file is read through one reader
// that stops one byte past a limit (1 GiB), so /dev/zero or a runaway pipe is an
// error, not all of memory; a FIFO or pipe that stays silent is an error after a
// bounded wait, not a hang; a directory is refused.
//
// Outputs (Note [Where an output goes], files.cc): a regular file or a new name
// is replaced atomically by a rename; a character device, FIFO or the caller's
// own descriptor (/dev/stdout, /dev/fd/N) is written directly, so /dev/null and
// /dev/stdout are sinks and a device is never replaced; a directory, block
// device or socket is refused.
//
// Thread-safety: every function may run concurrently, also on one file (for a
// regular file the last rename wins; each temporary has a name of its own).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "units/limits.h"
#include "units/units.h"

namespace weft {

// How much of an input is read and how long a pipe may stay silent. Callers keep
// the defaults (docs/limits.md); tests make them small.
struct ReadBounds {
  std::size_t max_bytes = limits::kMaxInputBytes;
  // From opening a FIFO, pipe or device until its first byte or its end.
  Seconds first_data_wait = limits::kMaxInputWait;
};

// The whole of `file`, one this program wrote (a log, a child's output).
// THROWS std::runtime_error "FILE: cannot read it (REASON)", also for a file
// larger than bounds.max_bytes, a directory, or a pipe silent for
// bounds.first_data_wait.
std::string read_file(const std::filesystem::path& file, const ReadBounds& bounds = {});

// The whole of `file`, which the user gave as input (a path, a FIFO, /dev/fd/N
// from `<(...)`); `what` says what it should be ("the profile").
// THROWS UsageError "FILE: cannot read WHAT (REASON)", where REASON is also
// "larger than the limit of 1GiB", "it is a directory" or "nothing arrived
// within 10s ...".
std::string read_input(const std::filesystem::path& file, std::string_view what, const ReadBounds& bounds = {});

// Writes `text` to `file`. A regular file or a new name: into a new temporary
// file beside it (the same directory, hence the same file system; beside the
// file a symbolic link names, which stays a link), flushed to disk, then renamed
// over it; a reader sees the old contents or the new, never a part; on failure
// the temporary is removed and `file` is left as it was. A new file is created
// like any other (mode 0666 less the umask). A character device or a FIFO with a
// reader is opened and written, nothing created or truncated; /dev/stdout,
// /dev/stderr, /dev/fd/N and /proc/self/fd/N are written to descriptor N as it
// stands (its offset, its append mode).
// THROWS std::runtime_error "FILE: cannot write it (STEP failed: REASON)", or
// "FILE: cannot write it (REASON)" for a directory, a block device, a socket or
// a FIFO no program is reading.
void write_file_atomically(const std::filesystem::path& file, std::string_view text);

// write_file_atomically for a file the user named with `flag`: a path that cannot
// be written is bad input.
// THROWS UsageError "FLAG FILE: cannot write it (STEP failed: REASON)" ("flag=FILE: ..."
// under ranges::KeywordSpelling).
void write_output(std::string_view flag, const std::filesystem::path& file, std::string_view text);

// Checks, before long work whose result goes to `file`, that write_output could
// write it: a new or regular file's directory exists and this process may create
// files in it; a device or FIFO may be written by this process; a descriptor
// (/dev/stdout) is open for writing; it is not a directory. A typo in an output
// path then costs nothing instead of the whole run. Creates and opens nothing.
// THROWS UsageError "FLAG FILE: cannot write it (REASON)", spelled as write_output's.
void check_output(std::string_view flag, const std::filesystem::path& file);

}  // namespace weft
