// weft: communication scheduling for data-parallel training. One binary, one
// subcommand per verb (docs/cli.md §5). Exit status: 0 success, 2 bad input, 1 failure.
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "units/units.h"

int main(int argc, char** argv) {
  CLI::App app{"weft: schedules the communication of data-parallel training so it hides behind "
               "computation.\nPlan and simulate strategies, train for real over Gloo, emulate slow links."};
  app.require_subcommand(1);
  // CLI11's own messages quote the value as given: cut a pasted one as weft's
  // own messages are (units.h, UsageError). Set before the subcommands copy it.
  app.failure_message([](const CLI::App* command, const CLI::Error& e) {
    return weft::cut_long_words(CLI::FailureMessage::simple(command, e));
  });
  int exit_status = 0;
  weft::cli::add_plan(app, exit_status);
  weft::cli::add_simulate(app, exit_status);
#ifdef WEFT_HAVE_RUNTIME
  weft::cli::add_train(app, exit_status);
  weft::cli::add_profile(app, exit_status);
  weft::cli::add_bench(app, exit_status);
  weft::cli::add_run(app, exit_status);
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
  weft::cli::add_netem(app, exit_status);
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
