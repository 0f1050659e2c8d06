#include "units/ranges.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "units/units.h"

namespace weft::ranges {
namespace {

std::string refusal(const Range& r, double value, std::string_view text = {}) {
  try {
    check(r, value, text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Ranges, MessagesNameTheFlagTheValueAndTheRange) {
  EXPECT_EQ(refusal(kLr, 1e308), "--lr 1e+308: expected a finite number in (0, 1000]");
  EXPECT_EQ(refusal(kLr, 1e308, "1e308"), "--lr 1e308: expected a finite number in (0, 1000]");
  EXPECT_EQ(refusal(kSteps, 0), "--steps 0: expected an integer in [1, 100000000]");
  EXPECT_EQ(refusal(kFailureTimeout, 1e308), "--failure-timeout 1e+308: expected a duration in (0, 86400] s");
  EXPECT_EQ(refusal(kPartition, 16, "16"), "--partition 16: expected a size in [1KiB, 1PiB]");
  EXPECT_EQ(refusal(kBandwidth, 1e-300, "1e-300Gbit"), "--bandwidth 1e-300Gbit: expected a rate in [1Kbit, 10Tbit]");
  EXPECT_EQ(refusal(kOuterMomentum, 1), "--outer-momentum 1: expected a finite number in [0, 1)");
}

TEST(Ranges, BoundsOpenAndClosedNonFiniteAndFractions) {
  EXPECT_TRUE(contains(kLr, 1e3));
  EXPECT_FALSE(contains(kLr, 0));
  EXPECT_TRUE(contains(kLatency, 0));
  EXPECT_FALSE(contains(kOuterMomentum, 1));
  for (const Range* r : kAll) {
    EXPECT_FALSE(contains(*r, std::numeric_limits<double>::infinity())) << r->flag;
    EXPECT_FALSE(contains(*r, std::numeric_limits<double>::quiet_NaN())) << r->flag;
    EXPECT_FALSE(contains(*r, -std::numeric_limits<double>::infinity())) << r->flag;
    EXPECT_TRUE(contains(*r, r->high_open ? r->high / 2 : r->high)) << r->flag;
  }
  EXPECT_FALSE(contains(kSteps, 1.5));
  EXPECT_TRUE(contains(kEpochs, 1.5));
}

TEST(Ranges, ParseReadsEachKindAndRefusesWhatIsOutside) {
  EXPECT_DOUBLE_EQ(parse(kLatency, "2ms"), 2e-3);
  EXPECT_DOUBLE_EQ(parse(kPartition, "4MiB"), 4 << 20);
  EXPECT_DOUBLE_EQ(parse(kBandwidth, "10Tbit"), 1.25e12);
  EXPECT_DOUBLE_EQ(parse(kLr, "0.05"), 0.05);
  EXPECT_THROW(parse(kBandwidth, "1e-300Gbit"), UsageError);
  EXPECT_THROW(parse(kBandwidth, "11Tbit"), UsageError);
  EXPECT_THROW(parse(kPartition, "1e300"), UsageError);
  EXPECT_THROW(parse(kGrace, "1e300"), UsageError);
  EXPECT_THROW(parse(kLr, "inf"), UsageError);
  EXPECT_THROW(parse(kLr, "nan"), UsageError);
  try {
    parse(kLatency, "abc");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--latency: duration 'abc' is not understood", 0), 0u) << e.what();
  }
}

TEST(Ranges, AHugeValueIsQuotedInAFewDozenCharacters) {
  const std::string huge(400'000, '9');
  for (const Range* r : {&kLr, &kLatency, &kPartition, &kBandwidth}) {
    try {
      parse(*r, huge);
      FAIL() << r->flag;
    } catch (const UsageError& e) {
      EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
      EXPECT_NE(std::string(e.what()).find("(400000 characters)"), std::string::npos) << e.what();
    }
  }
}

// docs/limits.md's table of numeric flags is this table: a row there for every
// row here, in the same order, with the same commands and the same range.
TEST(Ranges, TheDocsListEveryRangeAsTheCodeChecksIt) {
  std::ifstream in("docs/limits.md");
  ASSERT_TRUE(in) << "run from the source root";
  std::vector<std::vector<std::string>> rows;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Numeric flags";
    if (!in_section || line.rfind("| `--", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(1));
    for (std::string cell; std::getline(cells_in, cell, '|');) {
      const auto first = cell.find_first_not_of(' ');
      const auto last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), kAll.size()) << "docs/limits.md, ## Numeric flags: one row per range";
  for (std::size_t i = 0; i < kAll.size(); ++i) {
    const Range& r = *kAll[i];
    ASSERT_GE(rows[i].size(), 3u);
    EXPECT_EQ(rows[i][0], fmt::format("`{}`", r.flag)) << "row " << i;
    EXPECT_EQ(rows[i][1], r.commands) << r.flag;
    EXPECT_EQ(rows[i][2], accepted(r)) << r.flag;
  }
}

}  // namespace
}  // namespace weft::ranges
