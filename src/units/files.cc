#include "units/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "units/units.h"

namespace weft {
namespace {

// A new file beside `target`, closed and removed unless `publish` renames it over
// the target.
class TempFile {
 public:
  explicit TempFile(const std::filesystem::path& target) : target_(target) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      path_ = fmt::format("{}.tmp-{}-{}", target.string(), ::getpid(), counter.fetch_add(1));
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) fail("creating a temporary file");
    created_ = true;
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (created_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("writing");
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // Flushes to disk, closes and renames over the target.
  void publish() {
    if (::fsync(fd_) != 0) fail("flushing");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("closing");
    if (std::rename(path_.c_str(), target_.c_str()) != 0) fail("renaming into place");
    created_ = false;
  }

 private:
  [[noreturn]] void fail(std::string_view step) const {
    throw std::runtime_error(
        fmt::format("{}: cannot write it ({} failed: {})", target_.string(), step, std::strerror(errno)));
  }

  std::filesystem::path target_;
  std::string path_;
  int fd_ = -1;
  bool created_ = false;
};

// The whole of `file`, or nothing if it cannot be opened (errno says why).
std::optional<std::string> whole(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string read_file(const std::filesystem::path& file) {
  auto text = whole(file);
  if (!text) throw std::runtime_error(fmt::format("{}: cannot read it ({})", file.string(), std::strerror(errno)));
  return std::move(*text);
}

std::string read_input(const std::filesystem::path& file, std::string_view what) {
  auto text = whole(file);
  if (!text) throw UsageError(fmt::format("{}: cannot read {} ({})", file.string(), what, std::strerror(errno)));
  return std::move(*text);
}

void write_file_atomically(const std::filesystem::path& file, std::string_view text) {
  TempFile temporary(file);
  temporary.write_all(text);
  temporary.publish();
}

void check_output(std::string_view flag, const std::filesystem::path& file) {
  const std::filesystem::path dir = file.parent_path().empty() ? "." : file.parent_path();
  std::error_code error;
  std::string why;
  if (!std::filesystem::exists(dir, error)) {
    why = fmt::format("its directory {} does not exist", dir.string());
  } else if (!std::filesystem::is_directory(dir, error)) {
    why = fmt::format("{} is not a directory", dir.string());
  } else if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    why = fmt::format("no permission to create files in {}: {}", dir.string(), std::strerror(errno));
  } else {
    return;
  }
  throw UsageError(fmt::format("{} {}: cannot write it ({})", flag, file.string(), why));
}

void write_output(std::string_view flag, const std::filesystem::path& file, std::string_view text) {
  try {
    write_file_atomically(file, text);
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("{} {}", flag, e.what()));
  }
}

}  // namespace weft
