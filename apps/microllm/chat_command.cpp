// `microllm chat --model DIR [--system TEXT]`: a conversation through the model's chat
// template (io::ChatTemplate), the answer streamed as it is generated. `/reset` starts over,
// `/exit` (or end of input) leaves. The history is kept within the context: when the next
// prompt would not leave room for --max-new-tokens, the oldest turns are dropped (the
// system message stays) with a notice on stderr.
//
// With stdin not a terminal it reads one user message per line and prints one answer per
// line, backslash-escaped (a newline in the answer is written as \n, a backslash as \\),
// for scripts. A base model (no chat template) is an error naming the remedy.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "commands.h"
#include "generation.h"
#include "microllm/io/chat_template.h"

namespace microllm::app {
namespace {

struct ChatCli {
  GenerationFlags flags;
  std::string system, family;
};

std::string escape_line(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\\')
      out += "\\\\";
    else if (ch != '\r')
      out += ch;
  }
  return out;
}

int run_chat(ChatCli& cli) {
  resolve_model_folder(cli.flags, "chat");
  if (cli.flags.default_model)
    std::fprintf(stderr,
                 "chat: the default model (%s) is a small base model trained on the Brown "
                 "corpus: it continues the conversation as text in the style of its corpus; it "
                 "was not trained to follow instructions or answer questions\n",
                 cli.flags.model.c_str());
  const GenerationModel m = load_generation_model(cli.flags);
  MICROLLM_CHECK(m.tokenizer.has_value(), "chat", "the model folder '", cli.flags.model,
                 "' has no tokenizer.json; chat needs a tokenizer and a chat template");
  std::optional<io::ChatFamily> family;
  if (!cli.family.empty()) family = io::chat_family_from_name(cli.family);
  const io::ChatTemplate chat_template =
      io::ChatTemplate::from_config(m.tokenizer->config(), cli.flags.model, family);
  const infer::SamplingParams params = sampling_params(cli.flags, m);
  infer::Engine engine(m.weights, engine_options(cli.flags, m, 1));
  const bool interactive = isatty(STDIN_FILENO) != 0;
  const int64_t context = engine.max_model_len();

  std::vector<io::ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!cli.system.empty()) history.push_back({"system", cli.system, std::nullopt});
  };
  reset();
  if (interactive)
    std::fprintf(stderr, "chat: /reset starts over, /exit leaves (context %lld tokens)\n",
                 static_cast<long long>(context));
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit") break;
    if (line == "/reset") {
      reset();
      if (interactive) std::fprintf(stderr, "chat: history cleared\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line, std::nullopt});
    io::ChatOptions options;
    options.add_generation_prompt = true;
    std::vector<int32_t> prompt;
    while (true) {
      prompt = m.tokenizer->encode(chat_template.render(history, options),
                                   /*add_special_tokens=*/false);
      if (static_cast<int64_t>(prompt.size()) + params.max_new_tokens <= context) break;
      // Drop the oldest user/assistant turn; the system message (if any) stays.
      const size_t first = !history.empty() && history[0].role == "system" ? 1 : 0;
      MICROLLM_CHECK(history.size() > first + 1, "chat", "the message alone takes ", prompt.size(),
                     " tokens, more than the context of ", context, " minus ",
                     params.max_new_tokens, " new tokens");
      const size_t drop = history.size() > first + 2 ? 2 : 1;
      history.erase(history.begin() + static_cast<int64_t>(first),
                    history.begin() + static_cast<int64_t>(first + drop));
      std::fprintf(stderr, "chat: the oldest turn was dropped to stay within the context\n");
    }
    const std::vector<Completion> out = run_completions(
        engine, &*m.tokenizer, {prompt}, params, cli.flags.stop,
        [&](size_t, const std::string& text) {
          if (!interactive) return;
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
        },
        nullptr);
    const std::string& answer = out[0].text;
    if (interactive)
      std::printf("\n");
    else
      std::printf("%s\n", escape_line(answer).c_str());
    std::fflush(stdout);
    history.push_back({"assistant", answer, std::nullopt});
  }
  return 0;
}

}  // namespace

Command add_chat_command(CLI::App& parent) {
  auto c = std::make_shared<ChatCli>();
  CLI::App* cmd = parent.add_subcommand("chat", "Chat with a model through its chat template");
  add_generation_options(*cmd, c->flags);
  cmd->add_option("--system", c->system, "system message");
  cmd->add_option(
      "--template-family", c->family,
      "chat template family when the folder's is not recognised: " + io::chat_family_names());
  return {cmd, [c] { return run_chat(*c); }};
}

}  // namespace microllm::app
