// Reading whole files, and writing a file so that nothing half-written is ever
// left behind.
//
// Thread-safety: write_file_atomically may run concurrently, also on one file
// (the last rename wins; each temporary has a name of its own).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace weft {

// The whole of `file`, one this program wrote (a log, a child's output).
// THROWS std::runtime_error "FILE: cannot read it (REASON)".
std::string read_file(const std::filesystem::path& file);

// The whole of `file`, which the user gave as input; `what` says what it should
// be ("the profile"). THROWS UsageError "FILE: cannot read WHAT (REASON)".
std::string read_input(const std::filesystem::path& file, std::string_view what);

// Writes `text` to `file`: into a new temporary file beside it (the same
// directory, hence the same file system), flushed to disk, then renamed over
// `file`. A reader sees the old contents or the new, never a part; on failure the
// temporary is removed and `file` is left as it was. The file is created like any
// other (mode 0666 less the umask).
// THROWS std::runtime_error "FILE: cannot write it (STEP failed: REASON)".
void write_file_atomically(const std::filesystem::path& file, std::string_view text);

// write_file_atomically for a file the user named with `flag`: a path that cannot
// be written is bad input.
// THROWS UsageError "FLAG FILE: cannot write it (STEP failed: REASON)".
void write_output(std::string_view flag, const std::filesystem::path& file, std::string_view text);

// Checks, before long work whose result goes to `file`, that it could be written
// there: its directory exists and this process may create files in it. A typo in
// an output path then costs nothing instead of the whole run.
// THROWS UsageError "FLAG FILE: cannot write it (REASON)".
void check_output(std::string_view flag, const std::filesystem::path& file);

}  // namespace weft
