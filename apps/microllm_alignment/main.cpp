// microllm_alignment: the microllm side of the alignment tools (docs/alignment.md). Each
// subcommand lives in its own file and registers itself through alignment_commands.h; the
// Python drivers under tools/alignment/ run it and compare with PyTorch. Bad input ends
// with one clear line on stderr and a non-zero exit code.
#include <vector>

#include "alignment_commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "microllm_alignment: run microllm on inputs from files, for comparison with PyTorch"};
  app.require_subcommand(1);
  const std::vector<microllm::alignment::Command> commands = {
      microllm::alignment::add_model_command(app),
      microllm::alignment::add_operator_command(app),
  };
  return microllm::apps::run_subcommands(app, commands, argc, argv, "microllm_alignment");
}
