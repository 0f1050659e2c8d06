// weft's command line as one CLI11 app (cli/commands.h): the subcommands, how a
// failure is told and its exit status. main.cc is run_command_line(); tests that
// need the flags themselves build the app with add_commands().
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "units/units.h"

namespace weft::cli {
namespace {

// CLI11 reads an unsigned flag (a seed) with strtoull, which takes "-1" as
// 2^64 - 1 and anything beyond 2^64 as 2^64 - 1, silently. Every unsigned flag
// of every command is checked here as text first: digits only, at most 2^64 - 1.
void refuse_signs_and_overflow_of_unsigned(CLI::App& app) {
  const CLI::Validator whole_number(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return fmt::format("{}: expected a whole number >= 0", weft::cut_long_words(text));
        errno = 0;
        std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) return fmt::format("{}: expected a whole number below 2^64", weft::cut_long_words(text));
        return "";
      },
      "");
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      if (option->get_type_name().starts_with("UINT")) option->check(whole_number);
    }
  }
}

}  // namespace

void add_commands(CLI::App& app, int& exit_status) {
  app.require_subcommand(1);
  // CLI11's own messages quote the value as given: cut a pasted one as weft's
  // own messages are (units.h, UsageError). Set before the subcommands copy it.
  app.failure_message([](const CLI::App* command, const CLI::Error& e) {
    return weft::cut_long_words(CLI::FailureMessage::simple(command, e));
  });
  add_plan(app, exit_status);
  add_simulate(app, exit_status);
#ifdef WEFT_HAVE_RUNTIME
  add_train(app, exit_status);
  add_profile(app, exit_status);
  add_bench(app, exit_status);
  add_run(app, exit_status);
#else
  // Listed anyway, so that asking for them says why they are missing.
  for (const std::string verb : {"train", "profile", "bench", "run"}) {
    app.add_subcommand(verb, "(not in this build: configure with -DWEFT_RUNTIME=ON)")
        ->allow_extras()
        ->prefix_command()
        ->callback([verb] {
          throw weft::UsageError(fmt::format(
              "`weft {}` needs the LibTorch runtime, which this build leaves out; reconfigure with "
              "`cmake -DWEFT_RUNTIME=ON` (needs libtorch-dev), or run `make build`, which installs it and does",
              verb));
        });
  }
#endif
  add_netem(app, exit_status);
  refuse_signs_and_overflow_of_unsigned(app);
}

int run_command_line(int argc, char** argv) {
  CLI::App app{"weft: schedules the communication of data-parallel training so it hides behind "
               "computation.\nPlan and simulate strategies, train for real over Gloo, emulate slow links."};
  int exit_status = 0;
  add_commands(app, exit_status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and the usage hint
    return 2;
  } catch (const weft::UsageError& e) {
    std::cerr << "weft: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "weft: failed: " << weft::cut_long_words(e.what()) << "\n";
    return 1;
  }
  return exit_status;
}

}  // namespace weft::cli
