// The subcommands of the `weft` binary. Each add_* registers one subcommand on the
// app; its callback does the work. Bad user input is reported by throwing
// UsageError (main prints it and exits 2); any other failure sets `exit_status`
// to a non-zero value after printing what went wrong.
#pragma once

namespace CLI {
class App;
}

namespace weft::cli {

void add_plan(CLI::App& app, int& exit_status);      // plan_command.cc
void add_simulate(CLI::App& app, int& exit_status);  // plan_command.cc
void add_train(CLI::App& app, int& exit_status);     // train_command.cc (runtime)
void add_profile(CLI::App& app, int& exit_status);   // profile_command.cc (runtime)
void add_netem(CLI::App& app, int& exit_status);     // netem_command.cc
void add_bench(CLI::App& app, int& exit_status);     // bench_command.cc (runtime)
void add_run(CLI::App& app, int& exit_status);       // run_command.cc (runtime)

// Every subcommand above on `app` (those of the runtime as stubs that say why in
// a build without it), and CLI11's messages cut as weft's are (app.cc).
void add_commands(CLI::App& app, int& exit_status);

// The whole of weft's main(): parses argv, runs the subcommand, prints what went
// wrong; returns the exit status (0, 1, or 2 for bad input). app.cc.
int run_command_line(int argc, char** argv);

}  // namespace weft::cli
