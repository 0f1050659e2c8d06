// weft: communication scheduling for data-parallel training. One binary, one
// subcommand per verb (docs/cli.md §5). Exit status: 0 success, 2 bad input, 1 failure.
#include "cli/commands.h"

int main(int argc, char** argv) { return weft::cli::run_command_line(argc, argv); }
