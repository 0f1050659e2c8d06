// The launcher's view of its ranks' stderr: bytes read from each rank's pipe in
// whatever pieces they arrive, written to one descriptor as whole lines, each
// prefixed by the rank that wrote it.
//
// Note [Ranks' stderr]
// --------------------
// K processes writing to one terminal mix their lines mid-line: a line is often
// several write()s (`std::cerr << a << b`), and a progress line ends in no newline
// at all. So the launcher gives each rank of a job of two or more processes a
// pipe as stderr and forwards what arrives line by line, one write() per line
// ("[rank 1] text\n"), so that no two ranks' text shares a line. The launcher's own
// messages go through the same writer. A job of one process keeps the launcher's
// stderr (nothing to mix with), and stdout is never piped.
//
// A piece ended by '\r' is a progress line redrawn in place. On a terminal the
// latest one (of any rank) is drawn in place on the last line, and whole lines are
// printed above it; elsewhere (a file, a pipe) only what was drawn last before the
// '\n' is kept, as a terminal would have shown it. A rank's piped stderr is not a
// terminal, so a worker that checks (`weft train`'s progress) prints whole lines.
//
// Nothing a rank wrote is lost: when its pipe ends (it exited or died) a line
// without its '\n', or a progress line still drawn, is written as a line. A line
// longer than kMaxLineBytes is written in parts of that size, so memory stays
// bounded whatever a rank writes.
//
// Thread-safety: not thread-safe; one thread (the launcher's) calls everything.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weft::runtime {

class RankOutput {
 public:
  static constexpr std::size_t kMaxLineBytes = 64 * 1024;

  // Lines go to descriptor `out` (not owned); `terminal`: whether it is a
  // terminal, on which progress lines are drawn in place.
  RankOutput(int out, bool terminal);

  // A rank whose lines are prefixed "[`name`] "; returns its index for feed()
  // and end().
  int add(std::string name);

  // Bytes read from rank `source`'s stderr, in any pieces. REQUIRES: `source`
  // came from add() and has not ended.
  void feed(int source, std::string_view bytes);

  // Its pipe ended: what it left unfinished is written as a line. Idempotent.
  void end(int source);

  // One line of the launcher's own (no '\n' needed), written unprefixed as one
  // write(), above any progress line drawn.
  void say(std::string_view line);

 private:
  struct Source {
    std::string prefix;   // "[rank 1] "
    std::string pending;  // since the last '\n' or '\r'
    std::string drawn;    // the last piece ended by '\r' (a progress line), until a '\n'
    bool ended = false;
  };

  void on_line(int source, std::string_view text);
  void on_redraw(int source, std::string_view text);
  void write_line(const std::string& line);
  void write_all(std::string_view bytes);

  int out_;
  bool terminal_;
  std::vector<Source> sources_;
  int status_source_ = -1;  // on a terminal: whose progress line is drawn, -1 none
  std::string status_;      // that line as drawn, prefix included
};

}  // namespace weft::runtime
