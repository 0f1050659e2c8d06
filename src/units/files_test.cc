#include "units/files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace weft
