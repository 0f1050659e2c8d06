#include "runtime/launch/rank_output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace weft::runtime {
namespace {

// Back to the line's start, and the rest of the line erased (ANSI "erase in line").
constexpr std::string_view kClearLine = "\r\x1b[K";

}  // namespace

RankOutput::RankOutput(int out, bool terminal) : out_(out), terminal_(terminal) {}

int RankOutput::add(std::string name) {
  sources_.push_back(Source{.prefix = "[" + std::move(name) + "] "});
  return static_cast<int>(sources_.size()) - 1;
}

void RankOutput::feed(int source, std::string_view bytes) {
  Source& s = sources_.at(static_cast<std::size_t>(source));
  for (const char c : bytes) {
    if (c == '\n') {
      // "text\r\n" and "\rtext\r\n" end a progress line: it stays as the line.
      on_line(source, s.pending.empty() ? s.drawn : s.pending);
      s.pending.clear();
    } else if (c == '\r') {
      if (!s.pending.empty()) on_redraw(source, s.pending);
      s.pending.clear();
    } else {
      s.pending.push_back(c);
      if (s.pending.size() >= kMaxLineBytes) {
        on_line(source, s.pending);
        s.pending.clear();
      }
    }
  }
}

void RankOutput::end(int source) {
  Source& s = sources_.at(static_cast<std::size_t>(source));
  if (s.ended) return;
  if (!s.pending.empty() || !s.drawn.empty()) on_line(source, s.pending.empty() ? s.drawn : s.pending);
  s.pending.clear();
  s.ended = true;
}

void RankOutput::say(std::string_view line) { write_line(std::string(line)); }

void RankOutput::on_line(int source, std::string_view text) {
  Source& s = sources_.at(static_cast<std::size_t>(source));
  std::string line = s.prefix;
  line += text;
  // A line a rank writes after its own progress line replaces it, as on a terminal.
  if (status_source_ == source) {
    status_source_ = -1;
    status_.clear();
    line.insert(0, kClearLine);
  }
  s.drawn.clear();
  write_line(line);
}

void RankOutput::on_redraw(int source, std::string_view text) {
  Source& s = sources_.at(static_cast<std::size_t>(source));
  s.drawn = text;
  if (!terminal_) return;
  status_source_ = source;
  status_ = s.prefix + s.drawn;
  std::string bytes(kClearLine);
  bytes += status_;
  write_all(bytes);
}

void RankOutput::write_line(const std::string& line) {
  if (!terminal_ || status_source_ < 0) {
    write_all(line + "\n");
    return;
  }
  // Above the progress line, which is drawn again below it.
  std::string bytes(kClearLine);
  bytes += line;
  bytes += "\n";
  bytes += status_;
  write_all(bytes);
}

void RankOutput::write_all(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(out_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      pollfd writable{.fd = out_, .events = POLLOUT, .revents = 0};
      ::poll(&writable, 1, -1);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // stderr is gone (closed, a full disk): there is nowhere to say so
    }
  }
}

}  // namespace weft::runtime
