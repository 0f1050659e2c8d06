// A fake libFuzzer main: runs a fuzz target's LLVMFuzzerTestOneInput on its seed
// corpus and on a fixed number of deterministic mutations of it, so that the
// ordinary (g++) build's test suite exercises every parser's target in seconds
// without clang (docs/limits.md). It is no fuzzer — nothing is learnt from
// coverage — but its mutations are the ones that broke parsers before: flipped
// and replaced bytes, cuts, repeated spans (duplicate keys), numbers beyond a
// double or near its ends, NaN and Infinity, deep nesting and long arrays.
//
//   fake_fuzz_X [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...
//
// With only files and --mutations 0 it runs those inputs, as libFuzzer runs a
// reproducer. A crash, a sanitizer report or an exception escaping the target
// ends the run with a non-zero status; the input that caused it is first written
// to ./fake-fuzz-crash-<pid>.input (a signal handler, on its own stack so that
// overflowing recursion is caught too) and its origin printed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// The input being run and where it came from, for the signal handler.
std::string current;
std::string current_origin;
char crash_path[128];

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

extern "C" void on_fatal_signal(int sig) {
  const int fd = ::open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, current.data(), current.size());
    ::close(fd);
  }
  const char note[] = "fake libFuzzer: fatal signal on ";
  write_all(2, note, sizeof note - 1);
  write_all(2, current_origin.data(), current_origin.size());
  const char written[] = "; input written to ";
  write_all(2, written, sizeof written - 1);
  write_all(2, crash_path, std::strlen(crash_path));
  write_all(2, "\n", 1);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_handlers() {
  std::snprintf(crash_path, sizeof crash_path, "fake-fuzz-crash-%d.input", static_cast<int>(::getpid()));
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::sigaction(sig, &sa, nullptr);
}

void run(const std::string& input, const std::string& origin) {
  current = input;
  current_origin = origin;
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(current.data()), current.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake libFuzzer: %s: uncaught %s\n", origin.c_str(), e.what());
    on_fatal_signal(SIGABRT);
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Where parsers broke before: the ends of a double and of the integers, what is
// not a number in JSON, and numbers of the right kind that are physically absurd.
constexpr std::array<std::string_view, 24> kNumbers = {
    "1e308", "-1e308", "1e400", "-1e400", "1e-400", "1.7976931348623157e308", "4.9e-324", "-1",
    "0", "-0", "NaN", "Infinity", "-Infinity", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "2147483648", "4294967296", "1e15", "86401",
    "0.5", "1e9", "100000000"};
constexpr std::string_view kBytes = "{}[]\",:-.0123456789eE \n\t\\tfnu";

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string s, const std::vector<std::string>& corpus) {
    const int n = 1 + static_cast<int>(below(3));
    for (int i = 0; i < n; ++i) s = once(std::move(s), corpus);
    return s;
  }

 private:
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  std::string once(std::string s, const std::vector<std::string>& corpus) {
    switch (below(10)) {
      case 0:  // flip bits
        if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1 << below(8));
        return s;
      case 1:  // a structural byte somewhere
        if (!s.empty()) s[below(s.size())] = kBytes[below(kBytes.size())];
        return s;
      case 2:  // cut short
        s.resize(below(s.size() + 1));
        return s;
      case 3: {  // a span gone
        const size_t at = below(s.size() + 1);
        s.erase(at, below(s.size() - at + 1));
        return s;
      }
      case 4: {  // a span twice: duplicate keys, elements, fields
        const size_t at = below(s.size() + 1);
        const std::string span = s.substr(at, below(std::min<size_t>(s.size() - at, 200) + 1));
        s.insert(at, span);
        return s;
      }
      case 5:
      case 6: {  // a number replaced by one from the edges
        std::vector<size_t> starts;
        for (size_t i = 0; i < s.size(); ++i) {
          const bool digit = (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
          if (digit && (i == 0 || !((s[i - 1] >= '0' && s[i - 1] <= '9') || s[i - 1] == '.' || s[i - 1] == '-' ||
                                    s[i - 1] == 'e' || s[i - 1] == 'E'))) {
            starts.push_back(i);
          }
        }
        if (starts.empty()) return s;
        const size_t at = starts[below(starts.size())];
        size_t end = at + 1;
        while (end < s.size() && std::strchr("0123456789.eE+-", s[end]) != nullptr) ++end;
        s.replace(at, end - at, kNumbers[below(kNumbers.size())]);
        return s;
      }
      case 7: {  // nested in arrays or objects, around the limit and far past it
        constexpr std::array<size_t, 5> depths = {63, 64, 65, 1000, 100000};
        const size_t depth = depths[below(depths.size())];
        const bool objects = below(2) == 0;
        std::string out;
        out.reserve(s.size() + depth * 8);
        for (size_t i = 0; i < depth; ++i) out += objects ? "{\"a\":" : "[";
        out += below(4) == 0 ? std::string() : s;  // sometimes unterminated and empty
        if (below(2) == 0) {
          for (size_t i = 0; i < depth; ++i) out += objects ? "}" : "]";
        }
        return out;
      }
      case 8: {  // a long array or string in place of a value
        const size_t at = s.find(':');
        std::string value;
        if (below(2) == 0) {
          value = "[";
          const size_t n = below(16) == 0 ? 200000 : 1000;  // long ones are slow to parse: few
          for (size_t i = 0; i < n; ++i) value += i == 0 ? "0" : ",0";
          value += "]";
        } else {
          value = "\"" + std::string(below(4) == 0 ? 100000 : 100, 'x') + "\"";
        }
        if (at == std::string::npos) return value;
        size_t end = at + 1;
        while (end < s.size() && s[end] != ',' && s[end] != '}' && s[end] != ']') ++end;
        s.replace(at + 1, end - at - 1, value);
        return s;
      }
      default: {  // spliced with another seed
        const std::string& other = corpus[below(corpus.size())];
        return s.substr(0, below(s.size() + 1)) + other.substr(below(other.size() + 1));
      }
    }
  }

  std::mt19937_64 rng_;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "fake libFuzzer: %s\nusage: fake_fuzz_X [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 2000;
  std::uint64_t seed = 44;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--mutations" || arg == "--seed") && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (*end != '\0') usage("--mutations and --seed take a whole number");
      if (arg == "--mutations") {
        mutations = static_cast<long>(v);
      } else {
        seed = v;
      }
    } else {
      paths.emplace_back(arg);
    }
  }
  if (paths.empty()) usage("no corpus");
  std::vector<std::string> corpus;
  std::vector<std::string> names;
  for (const auto& path : paths) {
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // a deterministic order, whatever the file system's
    } else if (std::filesystem::is_regular_file(path)) {
      files.push_back(path);
    } else {
      usage(("no such file or folder: " + path.string()).c_str());
    }
    for (const auto& file : files) {
      corpus.push_back(read_file(file));
      names.push_back(file.string());
    }
  }
  if (corpus.empty()) usage("the corpus is empty");

  install_handlers();
  for (size_t i = 0; i < corpus.size(); ++i) run(corpus[i], names[i]);
  Mutator mutator(seed);
  for (long m = 0; m < mutations; ++m) {
    const size_t from = static_cast<size_t>(m) % corpus.size();
    run(mutator.mutate(corpus[from], corpus), "mutation " + std::to_string(m) + " of " + names[from]);
  }
  std::printf("fake libFuzzer: %zu seeds and %ld mutations (seed %llu) ran clean\n", corpus.size(), mutations,
              static_cast<unsigned long long>(seed));
  return 0;
}
