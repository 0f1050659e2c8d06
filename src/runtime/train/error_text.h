// How an exception's message is shown to a user: one line.
//
// LibTorch's c10::Error appends to its message "Exception raised from ... (most
// recent call first):" and a stack trace of a dozen frames, which tells a user
// nothing the first line does not (docs/failures.md: one line per event).
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace weft::runtime {

// `what` without LibTorch's stack trace and with any line breaks left as "; ".
inline std::string without_backtrace(std::string_view what) {
  std::string line(what.substr(0, what.find("Exception raised from ")));
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  for (std::size_t at = line.find('\n'); at != std::string::npos; at = line.find('\n', at)) line.replace(at, 1, "; ");
  return line;
}

}  // namespace weft::runtime
