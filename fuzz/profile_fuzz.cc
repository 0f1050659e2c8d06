// libFuzzer target: a profile (docs/limits.md). A profile that parses writes
// back to JSON that parses to the same profile.
#include <stdexcept>

#include "fuzz/fuzz_input.h"
#include "profile/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return weft::fuzz::refuse_or_read(data, size, [](std::string_view text) {
    const weft::Profile p = weft::parse_profile(text, "fuzz.json");
    const weft::Profile again = weft::parse_profile(weft::to_json(p), "again.json");
    if (again.size() != p.size() || again.total_bytes() != p.total_bytes()) {
      throw std::logic_error("a profile read back differs from the one written");
    }
  });
}
