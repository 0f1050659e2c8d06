// libFuzzer target: an all-reduce fit (`--network FILE`). A fit that parses
// makes a valid cluster whose costs are finite.
#include <cmath>
#include <stdexcept>

#include "fuzz/fuzz_input.h"
#include "plan/options.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return weft::fuzz::refuse_or_read(data, size, [](std::string_view text) {
    weft::Cluster c{.workers = 4, .bandwidth = 1e8, .latency = 1e-5};
    c.fitted = weft::parse_fit(text, "fuzz.json");
    weft::validate(c);
    for (weft::Bytes n : {weft::Bytes{0}, weft::Bytes{1}, weft::Bytes{1} << 20, weft::Bytes{1} << 40}) {
      if (!std::isfinite(weft::allreduce_time(c, n))) throw std::logic_error("a fitted all-reduce time is not finite");
    }
  });
}
