#include "netem/netns.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace weft::netem {
namespace {

// Note [Namespace names]: every name made from a pid and a kind parses back to that
// pid, and a prefix of one pid never passes for another.
TEST(NamespaceOwner, RoundTripsEveryKindOfName) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<pid_t> pid_of(1, 4194304);  // Linux's largest pid_max
  for (int i = 0; i < 1000; ++i) {
    const pid_t pid = pid_of(rng);
    for (const std::string suffix : {"h", "w0", "w17", "s3"}) {
      EXPECT_EQ(namespace_owner(namespace_prefix(pid) + suffix), pid) << pid << suffix;
    }
  }
}

TEST(NamespaceOwner, RejectsNamesNotMadeByWeft) {
  for (const char* name : {"", "weft", "weft12", "weftw0", "weft-1w0", "weft0w0", "weft12W0",
                           "weft12-w0", "myweft12w0", "other", "weft99999999999999999999w0"}) {
    EXPECT_EQ(namespace_owner(name), std::nullopt) << name;
  }
}

TEST(NamespacePrefix, IsWeftAndThePid) { EXPECT_EQ(namespace_prefix(4321), "weft4321"); }

}  // namespace
}  // namespace weft::netem
