// RankOutput alone (Note [Ranks' stderr]): bytes in any pieces become whole,
// prefixed lines; progress lines drawn with '\r'; nothing lost at a pipe's end.
// The launcher's use of it, with real processes: launcher_test.cc.
#include "runtime/launch/rank_output.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace weft::runtime {
namespace {

// What a RankOutput wrote, read back from an in-memory file.
class Written {
 public:
  Written() : fd_(::memfd_create("rank_output_test", 0)) {}
  ~Written() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string text() const {
    std::string all;
    char buffer[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd_, buffer, sizeof buffer, at);
      if (n <= 0) return all;
      all.append(buffer, static_cast<size_t>(n));
      at += n;
    }
  }

 private:
  int fd_;
};

TEST(RankOutputTest, PiecesOfLinesFromTwoRanksComeOutAsWholeLines) {
  Written out;
  RankOutput output(out.fd(), /*terminal=*/false);
  const int a = output.add("rank 0");
  const int b = output.add("rank 1");
  output.feed(a, "hel");
  output.feed(b, "wor");
  output.feed(a, "lo\nsec");
  output.feed(b, "ld\n");
  output.say("weft: launcher");
  output.feed(a, "ond\n\n");
  EXPECT_EQ(out.text(), "[rank 0] hello\n[rank 1] world\nweft: launcher\n[rank 0] second\n[rank 0] \n");
}

TEST(RankOutputTest, WhatARankLeftUnfinishedIsWrittenAtItsEnd) {
  Written out;
  RankOutput output(out.fd(), /*terminal=*/false);
  const int a = output.add("rank 0");
  const int b = output.add("server 0 (rank 1)");
  output.feed(a, "killed mid-li");
  output.feed(b, "\rstep 1\rstep 2");
  output.end(a);
  output.end(b);
  output.end(b);  // idempotent
  EXPECT_EQ(out.text(), "[rank 0] killed mid-li\n[server 0 (rank 1)] step 2\n");
}

// Not on a terminal, a redrawn line keeps what was drawn last, as a terminal shows it.
TEST(RankOutputTest, ProgressLinesKeepTheirLastDrawingOffATerminal) {
  Written out;
  RankOutput output(out.fd(), /*terminal=*/false);
  const int a = output.add("rank 0");
  output.feed(a, "\riteration 1/3\riteration 2/3");
  output.feed(a, "\riteration 3/3\n");
  output.feed(a, "done\r\n");  // CRLF
  output.feed(a, "\riteration 1/3   \rcheckpoint written\n");
  EXPECT_EQ(out.text(), "[rank 0] iteration 3/3\n[rank 0] done\n[rank 0] checkpoint written\n");
}

// On a terminal the progress line is drawn in place, and other lines go above it.
TEST(RankOutputTest, OnATerminalAProgressLineStaysBelowTheOtherLines) {
  Written out;
  RankOutput output(out.fd(), /*terminal=*/true);
  const int a = output.add("rank 0");
  const int b = output.add("rank 1");
  output.feed(a, "\rstep 1\r");
  output.feed(b, "note\n");
  output.feed(a, "step 2\r");
  output.feed(a, "done\n");
  EXPECT_EQ(out.text(),
            "\r\x1b[K[rank 0] step 1"                      // drawn
            "\r\x1b[K[rank 1] note\n[rank 0] step 1"       // a line above it, redrawn
            "\r\x1b[K[rank 0] step 2"                      // redrawn in place
            "\r\x1b[K[rank 0] done\n");                    // replaced by its rank's line
}

TEST(RankOutputTest, ALineWithoutEndIsCutAtTheBound) {
  Written out;
  RankOutput output(out.fd(), /*terminal=*/false);
  const int a = output.add("rank 0");
  output.feed(a, std::string(RankOutput::kMaxLineBytes + 10, 'x'));
  output.end(a);
  EXPECT_EQ(out.text(), "[rank 0] " + std::string(RankOutput::kMaxLineBytes, 'x') + "\n[rank 0] " +
                            std::string(10, 'x') + "\n");
}

}  // namespace
}  // namespace weft::runtime
