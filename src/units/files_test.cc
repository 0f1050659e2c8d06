#include "units/files.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include "units/units.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

class WriteFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("weft_files_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  long entries() const { return std::distance(fs::directory_iterator(dir_), {}); }
  fs::path dir_;
};

std::string contents(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The message of the UsageError that `f` throws, or "" (and a failure) if none.
template <typename F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `text` of `n` bytes, not all alike.
std::string sample(std::size_t n) {
  std::string text(n, ' ');
  for (std::size_t i = 0; i < n; ++i) text[i] = static_cast<char>('a' + i % 26);
  return text;
}

// Opens the FIFO `fifo` for writing once a reader has opened it, giving up (-1)
// after 5 s, so a test whose reader failed ends instead of hanging.
int open_fifo_for_writing(const fs::path& fifo) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (fd >= 0 || errno != ENXIO || seconds_since(start) > 5) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Everything written to `fd` (opened without blocking) until its end, waiting
// at most 5 s for a writer; closes it.
std::string read_to_end(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  std::string text;
  if (::poll(&p, 1, 5000) == 1) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    char chunk[4096];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

// A character device's identity, to see that it is still the device.
dev_t device_of(const fs::path& file) {
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return 0;
  return st.st_rdev;
}

TEST_F(WriteFile, AnInputIsReadWholeOrNamedWithWhatItShouldBe) {
  const fs::path file = dir_ / "in.json";
  write_file_atomically(file, std::string("{\"a\": 1}\n\0binary", 16));
  EXPECT_EQ(read_input(file, "a profile"), std::string("{\"a\": 1}\n\0binary", 16));
  try {
    read_input(dir_ / "absent.json", "a profile");
    FAIL() << "a missing input was read";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("absent.json: cannot read a profile (No such file"), std::string::npos)
        << e.what();
  }
  // A file of the program's own that is missing is its failure, not the user's.
  EXPECT_EQ(read_file(file), std::string("{\"a\": 1}\n\0binary", 16));
  try {
    read_file(dir_ / "absent.log");
    FAIL() << "a missing file was read";
  } catch (const UsageError&) {
    FAIL() << "a missing file of the program's own was called the user's error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.log: cannot read it (No such file"), std::string::npos) << e.what();
  }
}

TEST_F(WriteFile, ReplacesTheOldContentsAndLeavesNoTemporary) {
  const fs::path file = dir_ / "out.json";
  { std::ofstream(file) << "old contents, longer than the new"; }
  write_file_atomically(file, "new");
  EXPECT_EQ(contents(file), "new");
  EXPECT_EQ(entries(), 1);
}

TEST_F(WriteFile, FailureNamesTheFileAndTheStepAndLeavesNothing) {
  const fs::path file = dir_ / "no_such_dir" / "out.json";
  try {
    write_file_atomically(file, "text");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file.string() + ": cannot write it (creating a temporary file failed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(entries(), 0);
}

TEST_F(WriteFile, AnOutputTheUserNamedIsAUsageErrorNamingTheFlag) {
  const fs::path file = dir_ / "no_such_dir" / "trace.json";
  try {
    write_output("--trace", file, "{}");
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--trace " + file.string() + ": cannot write it", 0), 0u) << e.what();
  }
  write_output("--trace", dir_ / "trace.json", "{}");
  EXPECT_EQ(contents(dir_ / "trace.json"), "{}");
}

TEST_F(WriteFile, AnOutputIsCheckedBeforeTheWorkThatFillsIt) {
  EXPECT_NO_THROW(check_output("--out", dir_ / "later.json"));
  EXPECT_NO_THROW(check_output("--out", "in-the-working-directory.json"));
  EXPECT_EQ(entries(), 0) << "checking creates nothing";
  const fs::path missing = dir_ / "no_such_dir" / "later.json";
  try {
    check_output("--out", missing);
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + missing.string() + ": cannot write it (its directory " +
                                         (dir_ / "no_such_dir").string() + " does not exist)");
  }
  { std::ofstream(dir_ / "a_file") << "not a directory"; }
  try {
    check_output("--out", dir_ / "a_file" / "later.json");
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "a_file").string() + " is not a directory"), std::string::npos)
        << e.what();
  }
}

// Note [Bounded reads]: a file over the limit is refused from its size, unread.
TEST_F(WriteFile, AnInputOverTheLimitIsRefusedNamingTheFileAndTheLimit) {
  const fs::path file = dir_ / "in.json";
  { std::ofstream(file) << sample(100); }
  EXPECT_EQ(read_input(file, "a profile", {.max_bytes = 100}), sample(100));
  { std::ofstream(file) << sample(101); }
  EXPECT_EQ(usage_error([&] { read_input(file, "a profile", {.max_bytes = 100}); }),
            file.string() + ": cannot read a profile (larger than the limit of 100B)");
  try {
    read_file(file, {.max_bytes = 100});
    FAIL() << "a file over the limit was read";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), file.string() + ": cannot read it (larger than the limit of 100B)");
  }
  EXPECT_EQ(usage_error([&] { read_input(dir_, "a profile"); }),
            dir_.string() + ": cannot read a profile (it is a directory)");
}

TEST_F(WriteFile, AnEndlessDeviceIsRefusedByTheSameBound) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(usage_error([] { read_input("/dev/zero", "a profile", {.max_bytes = 1 << 20}); }),
            "/dev/zero: cannot read a profile (larger than the limit of 1MiB)");
  EXPECT_LT(seconds_since(start), 5);
  EXPECT_EQ(read_input("/dev/null", "a profile"), "");
}

TEST_F(WriteFile, AFifoIsReadWhileItsWriterWrites) {
  const fs::path fifo = dir_ / "in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string text = sample(300'000);  // more than a pipe holds: the writer waits for the reader
  std::thread writer([&] {
    const int fd = open_fifo_for_writing(fifo);
    for (std::string_view left = text; fd >= 0 && !left.empty();) {
      const ssize_t n = ::write(fd, left.data(), std::min<std::size_t>(left.size(), 10'000));
      if (n <= 0) break;
      left.remove_prefix(static_cast<std::size_t>(n));
    }
    if (fd >= 0) ::close(fd);
  });
  EXPECT_EQ(read_input(fifo, "a profile"), text);
  writer.join();
}

TEST_F(WriteFile, AFifoNoProgramWritesIsAnErrorNotAHang) {
  const fs::path fifo = dir_ / "in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(usage_error([&] { read_input(fifo, "a profile", {.first_data_wait = 0.2}); }),
            fifo.string() + ": cannot read a profile (nothing arrived within 200ms; is a program writing to it?)");
  EXPECT_LT(seconds_since(start), 5);
}

// What `<(...)` gives: /dev/fd/N, a pipe, read through the same bound.
TEST_F(WriteFile, ADescriptorIsReadThroughTheSameBound) {
  for (const std::size_t n : {100, 101}) {
    int ends[2];
    ASSERT_EQ(::pipe(ends), 0);
    ASSERT_EQ(::write(ends[1], sample(n).data(), n), static_cast<ssize_t>(n));
    ::close(ends[1]);
    const fs::path file = "/proc/self/fd/" + std::to_string(ends[0]);
    if (n == 100) {
      EXPECT_EQ(read_input(file, "a profile", {.max_bytes = 100}), sample(n));
    } else {
      EXPECT_EQ(usage_error([&] { read_input(file, "a profile", {.max_bytes = 100}); }),
                file.string() + ": cannot read a profile (larger than the limit of 100B)");
    }
    ::close(ends[0]);
  }
}

// Note [Where an output goes]: a device is written, never replaced; nothing is
// created beside it.
TEST_F(WriteFile, ACharacterDeviceIsWrittenNotReplaced) {
  const dev_t null = device_of("/dev/null");
  ASSERT_NE(null, 0u) << "/dev/null is not a character device here";
  EXPECT_NO_THROW(check_output("--trace", "/dev/null"));
  write_output("--trace", "/dev/null", "{}");
  EXPECT_EQ(device_of("/dev/null"), null);
  const dev_t full = device_of("/dev/full");
  if (full != 0) {
    EXPECT_EQ(usage_error([] { write_output("--trace", "/dev/full", "{}"); }),
              "--trace /dev/full: cannot write it (writing failed: No space left on device)");
    EXPECT_EQ(device_of("/dev/full"), full);
  }
  for (const auto& entry : fs::directory_iterator("/dev")) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  }
}

TEST_F(WriteFile, AFifoIsWrittenToItsReaderAndRefusedWithoutOne) {
  const fs::path fifo = dir_ / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NO_THROW(check_output("--trace", fifo)) << "its reader may start later";
  EXPECT_EQ(usage_error([&] { write_output("--trace", fifo, "{}"); }),
            "--trace " + fifo.string() +
                ": cannot write it (it is a FIFO that no program is reading; start its reader first)");
  const int read_end = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(read_end, 0);
  std::string received;
  std::thread reader([&] { received = read_to_end(read_end); });
  const std::string text = sample(300'000);
  write_output("--trace", fifo, text);
  reader.join();
  EXPECT_EQ(received, text);
  EXPECT_EQ(fs::status(fifo).type(), fs::file_type::fifo);
  EXPECT_EQ(entries(), 1) << "no temporary";
}

// /dev/stdout, /dev/fd/N: the descriptor as it stands, left open.
TEST_F(WriteFile, ADescriptorIsWrittenAndLeftOpen) {
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const fs::path file = "/dev/fd/" + std::to_string(ends[1]);
  EXPECT_NO_THROW(check_output("--out", file));
  write_output("--out", file, "one ");
  write_output("--out", "/proc/self/fd/" + std::to_string(ends[1]), "two");
  ::close(ends[1]);
  EXPECT_EQ(read_to_end(ends[0]), "one two");
  const std::string closed = "/dev/fd/" + std::to_string(ends[1]);
  EXPECT_EQ(usage_error([&] { check_output("--out", closed); }),
            "--out " + closed + ": cannot write it (descriptor " + std::to_string(ends[1]) + " is not open)");
}

TEST_F(WriteFile, ADirectoryIsNotAnOutput) {
  const fs::path sub = dir_ / "sub";
  fs::create_directory(sub);
  const std::string message = "--out " + sub.string() + ": cannot write it (it is a directory; name a file in it)";
  EXPECT_EQ(usage_error([&] { check_output("--out", sub); }), message);
  EXPECT_EQ(usage_error([&] { write_output("--out", sub, "{}"); }), message);
  EXPECT_TRUE(fs::is_directory(sub));
  EXPECT_EQ(entries(), 1);
}

// A link to a regular file stays a link; the file it names is replaced.
TEST_F(WriteFile, ALinkIsFollowedToTheFileItNames) {
  const fs::path file = dir_ / "real.json";
  { std::ofstream(file) << "old"; }
  fs::create_symlink(file.filename(), dir_ / "link.json");
  EXPECT_NO_THROW(check_output("--out", dir_ / "link.json"));
  write_output("--out", dir_ / "link.json", "new");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.json"));
  EXPECT_EQ(contents(file), "new");
  EXPECT_EQ(entries(), 2);
}

}  // namespace
}  // namespace weft
