// What every fuzz target shares: the input as text, and the rule that bad input
// may only be refused with a UsageError (docs/limits.md, docs/errors.md).
// Anything else escaping a parser — another exception, a crash, a sanitizer
// report, a hang — is a bug the fuzzer reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "units/units.h"

namespace weft::fuzz {

// Runs read(text) and swallows the UsageError that refuses bad input.
template <typename Read>
int refuse_or_read(const std::uint8_t* data, std::size_t size, Read read) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    read(text);
  } catch (const UsageError&) {
  }
  return 0;
}

}  // namespace weft::fuzz
