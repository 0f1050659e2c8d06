// libFuzzer target: a metrics file (`weft train --metrics`, one JSON object a line).
#include "bench/metrics.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return weft::fuzz::refuse_or_read(data, size,
                                    [](std::string_view text) { weft::bench::parse_metrics(text, "fuzz.jsonl"); });
}
