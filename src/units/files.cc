#include "units/files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "units/ranges.h"

namespace weft {
namespace {

// Note [Bounded reads]: every input is read by read_bounded. It opens the file
// without blocking (opening a FIFO otherwise waits for a writer), refuses a
// directory, refuses a regular file over the limit from its size alone, and
// reads at most limit + 1 bytes into a buffer that doubles but never past
// limit + 1: /dev/zero is refused after 1 GiB (about half a second, mostly the
// kernel mapping the memory) and no allocation exceeds the limit. A FIFO, pipe
// or device is polled for its first byte or its end for at most
// ReadBounds::first_data_wait: a FIFO no program writes to reports neither
// (Linux reports its end only after a writer came and went). Once data flows, a
// slow writer is waited for.

// Note [Where an output goes]: an output is renamed into place only over a
// regular file or a new name. A rename over /dev/full or /dev/null (as root)
// would replace the device by a regular file and create the temporary in /dev;
// so a character device or a FIFO is opened and written as it is (no O_CREAT, no
// O_TRUNC): /dev/null discards, /dev/full fails with ENOSPC, a FIFO feeds its
// reader. A FIFO is opened without blocking: with no reader the open fails at
// once (ENXIO) and weft says so instead of waiting for a reader that may never
// come. /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N name descriptor
// N, which this process holds: reopening it would truncate the file a shell's
// `>` opened (and lose `>>`'s appending), renaming over it would replace
// /dev/stdout itself, so weft writes to descriptor N. A directory, a block device
// (a disk) and a socket are refused. A write to a FIFO whose reader has gone
// raises SIGPIPE, as for any Unix tool.

// A descriptor, closed when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  // Closes it now; false (errno set) if closing failed.
  bool close() { return ::close(std::exchange(fd_, -1)) == 0; }

 private:
  int fd_;
};

bool make_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

// True once `fd` has data or its end (or an error read() will report), false if
// neither came within `wait`.
bool wait_for_data(int fd, Seconds wait) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait));
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30)));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;
  }
}

// The whole of `file` within `bounds` (Note [Bounded reads]), or nothing and
// `why` (the REASON of "cannot read it (REASON)").
std::optional<std::string> read_bounded(const std::filesystem::path& file, const ReadBounds& bounds,
                                        std::string& why) {
  Descriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  struct stat st {};
  if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !make_blocking(fd.get())) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  const auto too_large = [&] {
    return fmt::format("larger than the limit of {}", format_bytes(static_cast<Bytes>(bounds.max_bytes)));
  };
  if (S_ISDIR(st.st_mode)) {
    why = "it is a directory";
    return std::nullopt;
  }
  const bool regular = S_ISREG(st.st_mode);
  if (regular && static_cast<std::uintmax_t>(st.st_size) > bounds.max_bytes) {
    why = too_large();
    return std::nullopt;
  }
  if (!regular && !wait_for_data(fd.get(), bounds.first_data_wait)) {
    const std::string wait = format_duration(bounds.first_data_wait);
    why = fmt::format("nothing arrived within {}; is a program writing to it?", wait);
    return std::nullopt;
  }
  const std::size_t most = std::min(bounds.max_bytes, std::numeric_limits<std::size_t>::max() - 1) + 1;
  // malloc and realloc, not std::string: nothing is zeroed first, a large block
  // grows without a copy (glibc remaps it), and no block is larger than asked
  // for, where std::string's own growth may double past `most`.
  // A regular file is read into its size and one byte more, which meets its end.
  const std::size_t first = regular ? static_cast<std::size_t>(st.st_size) + 1 : 0;
  std::size_t size = std::min(std::max(first, std::size_t{64} << 10), most);
  std::unique_ptr<char, decltype(&std::free)> buffer(static_cast<char*>(std::malloc(size)), &std::free);
  std::size_t used = 0;
  for (;;) {
    if (used == size && buffer != nullptr) {
      size = size >= most / 2 ? most : 2 * size;
      char* bigger = static_cast<char*>(std::realloc(buffer.get(), size));
      if (bigger != nullptr) (void)buffer.release();  // realloc took the old block; else reset frees it
      buffer.reset(bigger);
    }
    if (buffer == nullptr) {
      why = fmt::format("no memory for {} bytes", size);
      return std::nullopt;
    }
    const ssize_t n = ::read(fd.get(), buffer.get() + used, size - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
    if (used > bounds.max_bytes) {
      why = too_large();
      return std::nullopt;
    }
  }
  return std::string(buffer.get(), used);
}

[[noreturn]] void cannot_write(const std::filesystem::path& file, std::string_view step) {
  const char* reason = std::strerror(errno);
  throw std::runtime_error(fmt::format("{}: cannot write it ({} failed: {})", file.string(), step, reason));
}

// Writes all of `data` to `fd`; false (errno set) if a write failed.
bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {  // a descriptor another program made non-blocking
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// A new file beside `target`, closed and removed unless `publish` renames it over
// the target. Failures name `named`, the path the caller gave.
class TempFile {
 public:
  TempFile(const std::filesystem::path& target, const std::filesystem::path& named) : target_(target), named_(named) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      path_ = fmt::format("{}.tmp-{}-{}", target.string(), ::getpid(), counter.fetch_add(1));
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) cannot_write(named_, "creating a temporary file");
    created_ = true;
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (created_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(std::string_view data) {
    if (!write_all(fd_, data)) cannot_write(named_, "writing");
  }

  // Flushes to disk, closes and renames over the target.
  void publish() {
    if (::fsync(fd_) != 0) cannot_write(named_, "flushing");
    if (::close(std::exchange(fd_, -1)) != 0) cannot_write(named_, "closing");
    if (std::rename(path_.c_str(), target_.c_str()) != 0) cannot_write(named_, "renaming into place");
    created_ = false;
  }

 private:
  std::filesystem::path target_;
  std::filesystem::path named_;
  std::string path_;
  int fd_ = -1;
  bool created_ = false;
};

// How an output is written (Note [Where an output goes]).
struct Target {
  enum class Way { kRename, kOpen, kDescriptor, kRefuse };
  Way way;
  std::filesystem::path path;  // kRename: the file replaced (a link's target); kOpen: the file opened
  int fd = -1;                 // kDescriptor
  std::string refusal;         // kRefuse: why not
};

// The descriptor that `file` names (/dev/stdout, /dev/fd/N, ...), if it names one.
std::optional<int> descriptor_named(const std::filesystem::path& file) {
  const std::string name = file.lexically_normal().string();
  if (name == "/dev/stdin") return 0;
  if (name == "/dev/stdout") return 1;
  if (name == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (!name.starts_with(prefix)) continue;
    int fd = -1;
    const char* end = name.data() + name.size();
    const auto [stop, error] = std::from_chars(name.data() + prefix.size(), end, fd);
    if (error == std::errc() && stop == end && fd >= 0) return fd;
  }
  return std::nullopt;
}

Target where_to_write(const std::filesystem::path& file) {
  const auto refuse = [](std::string why) { return Target{.way = Target::Way::kRefuse, .refusal = std::move(why)}; };
  if (const std::optional<int> fd = descriptor_named(file)) {
    const int flags = ::fcntl(*fd, F_GETFL);
    if (flags < 0) return refuse(fmt::format("descriptor {} is not open", *fd));
    if ((flags & O_ACCMODE) == O_RDONLY) return refuse(fmt::format("descriptor {} is open only for reading", *fd));
    return {.way = Target::Way::kDescriptor, .path = file, .fd = *fd};
  }
  struct stat st {};
  // A new name, or one that cannot be reached: creating the temporary says why.
  if (::stat(file.c_str(), &st) != 0) return {.way = Target::Way::kRename, .path = file};
  if (S_ISREG(st.st_mode)) {
    struct stat link {};
    if (::lstat(file.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return {.way = Target::Way::kRename, .path = file};
    std::error_code error;
    std::filesystem::path real = std::filesystem::canonical(file, error);
    if (error) return refuse(fmt::format("cannot follow the link: {}", error.message()));
    return {.way = Target::Way::kRename, .path = std::move(real)};
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return {.way = Target::Way::kOpen, .path = file};
  const std::string_view accepted = "weft writes files, character devices and FIFOs";
  if (S_ISDIR(st.st_mode)) return refuse("it is a directory; name a file in it");
  if (S_ISBLK(st.st_mode)) return refuse(fmt::format("it is a block device; {}", accepted));
  if (S_ISSOCK(st.st_mode)) return refuse(fmt::format("it is a socket; {}", accepted));
  return refuse(fmt::format("it is not a file; {}", accepted));
}

// Writes to a character device or a FIFO in place (Note [Where an output goes]).
void write_in_place(const std::filesystem::path& file, std::string_view text) {
  Descriptor fd(::open(file.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0 && errno == ENXIO) {
    throw std::runtime_error(fmt::format(
        "{}: cannot write it (it is a FIFO that no program is reading; start its reader first)", file.string()));
  }
  if (fd.get() < 0) cannot_write(file, "opening");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) cannot_write(file, "opening");
  if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {  // replaced since where_to_write looked
    throw std::runtime_error(fmt::format("{}: cannot write it (it changed while it was opened)", file.string()));
  }
  if (!make_blocking(fd.get())) cannot_write(file, "opening");
  if (!write_all(fd.get(), text)) cannot_write(file, "writing");
  if (!fd.close()) cannot_write(file, "closing");
}

// What stops a new file from being created at `file`, or nothing.
std::string why_no_new_file(const std::filesystem::path& file) {
  const std::filesystem::path dir = file.parent_path().empty() ? "." : file.parent_path();
  std::error_code error;
  if (!std::filesystem::exists(dir, error)) return fmt::format("its directory {} does not exist", dir.string());
  if (!std::filesystem::is_directory(dir, error)) return fmt::format("{} is not a directory", dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return fmt::format("no permission to create files in {}: {}", dir.string(), std::strerror(errno));
  }
  return "";
}

}  // namespace

std::string read_file(const std::filesystem::path& file, const ReadBounds& bounds) {
  std::string why;
  auto text = read_bounded(file, bounds, why);
  if (!text) throw std::runtime_error(fmt::format("{}: cannot read it ({})", file.string(), why));
  return std::move(*text);
}

std::string read_input(const std::filesystem::path& file, std::string_view what, const ReadBounds& bounds) {
  std::string why;
  auto text = read_bounded(file, bounds, why);
  if (!text) throw UsageError(fmt::format("{}: cannot read {} ({})", file.string(), what, why));
  return std::move(*text);
}

void write_file_atomically(const std::filesystem::path& file, std::string_view text) {
  const Target target = where_to_write(file);
  switch (target.way) {
    case Target::Way::kRename: {
      TempFile temporary(target.path, file);
      temporary.write(text);
      temporary.publish();
      return;
    }
    case Target::Way::kOpen:
      write_in_place(file, text);
      return;
    case Target::Way::kDescriptor:
      // What this process printed before goes first.
      if (target.fd == 1) std::fflush(stdout);
      if (target.fd == 2) std::fflush(stderr);
      if (!write_all(target.fd, text)) cannot_write(file, "writing");
      return;
    case Target::Way::kRefuse:
      break;
  }
  throw std::runtime_error(fmt::format("{}: cannot write it ({})", file.string(), target.refusal));
}

void check_output(std::string_view flag, const std::filesystem::path& file) {
  const Target target = where_to_write(file);
  std::string why;
  switch (target.way) {
    case Target::Way::kRename:
      why = why_no_new_file(target.path);
      break;
    case Target::Way::kOpen:
      if (::access(file.c_str(), W_OK) != 0) why = fmt::format("no permission to write it: {}", std::strerror(errno));
      break;
    case Target::Way::kDescriptor:
      break;
    case Target::Way::kRefuse:
      why = target.refusal;
      break;
  }
  if (!why.empty()) throw UsageError(fmt::format("{}: cannot write it ({})", ranges::given(flag, file.string()), why));
}

void write_output(std::string_view flag, const std::filesystem::path& file, std::string_view text) {
  try {
    write_file_atomically(file, text);
  } catch (const std::runtime_error& e) {
    throw UsageError(ranges::given(flag, e.what()));  // e.what() begins with the file
  }
}

}  // namespace weft
