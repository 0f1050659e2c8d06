// libFuzzer target: a bench.json (`weft bench --report`), read and printed as
// the report prints it.
#include "bench/report.h"
#include "bench/results.h"
#include "fuzz/fuzz_input.h"
#include "units/json_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return weft::fuzz::refuse_or_read(data, size, [](std::string_view text) {
    const auto results = weft::bench::results_from_json(weft::parse_json(text, "fuzz.json", "a bench"), "fuzz.json");
    weft::bench::format_table(results);
  });
}
