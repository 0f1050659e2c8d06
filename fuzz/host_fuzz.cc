// libFuzzer target: a host description, and the host fields of an old profile
// (docs/formats.md §6.7). A host that parses writes back to JSON that parses to
// the same host.
#include <stdexcept>

#include "cost/host.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return weft::fuzz::refuse_or_read(data, size, [](std::string_view text) {
    if (const auto old = weft::host_in_profile(text, "profile.json")) weft::validate(*old);
    const weft::Host h = weft::parse_host(text, "fuzz.json");
    if (weft::parse_host(weft::to_json(h), "again.json") != h) {
      throw std::logic_error("a host read back differs from the one written");
    }
  });
}
