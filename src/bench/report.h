// The table `weft bench` prints at the end: per link, per strategy (and the DDP
// peer), the measured and predicted steady-state iteration time, the prediction's
// error, and the measured (and predicted) speed-up over wfbp; in accuracy mode also
// the time to the target accuracy. Failed and skipped runs are listed below it.
//
// Thread-safety: pure function.
#pragma once

#include <string>

#include "bench/results.h"

namespace weft::bench {

std::string format_table(const BenchResults& results);

}  // namespace weft::bench
