// The microllm command-line tool. Each subcommand lives in its own file and registers
// itself through commands.h. Bad input ends with one clear line on stderr and a non-zero
// exit code; library errors (microllm::Error) are caught here.
#include <vector>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"microllm: train, serve and verify small decoder-only language models"};
  app.require_subcommand(1);
  std::vector<microllm::app::Command> commands = {
      microllm::app::add_demo_command(app),      microllm::app::add_inspect_command(app),
      microllm::app::add_tokenizer_command(app), microllm::app::add_train_command(app),
      microllm::app::add_eval_command(app),      microllm::app::add_launch_command(app),
      microllm::app::add_forward_command(app),   microllm::app::add_tokenize_command(app),
      microllm::app::add_generate_command(app),  microllm::app::add_chat_command(app),
  };
#if MICROLLM_WITH_SERVER
  commands.push_back(microllm::app::add_serve_command(app));
#endif
  return microllm::apps::run_subcommands(app, commands, argc, argv, "microllm");
}
