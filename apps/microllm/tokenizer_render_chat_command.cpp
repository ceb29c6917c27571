// `microllm tokenizer render-chat`: renders OpenAI-style messages with the model's chat
// template, as Hugging Face apply_chat_template(messages, tokenize=False, ...) does.
//
//   microllm tokenizer render-chat --tokenizer DIR|tokenizer.json|tokenizer_config.json
//       --messages FILE.json [--add-generation-prompt] [--enable-thinking true|false]
//       [--date-string "26 Jul 2024"] [--template-family NAME]
//     FILE.json holds the list [{"role": "system"|"user"|"assistant", "content": "..."}, ...];
//     prints the prompt exactly as rendered: no newline is added after it.
//   microllm tokenizer render-chat --tokenizer ... --requests-jsonl FILE [same options]
//     FILE holds one JSON object per line: {"messages": [...], "add_generation_prompt": bool,
//     "enable_thinking": bool, "date_string": "..."} (the last three optional; absent ones
//     take the command-line values); prints one JSON string (the prompt) per line.
//
// Only tokenizer_config.json is read (chat_template, bos_token, eos_token). The family is
// recognised from the template; --template-family names it instead. Docs: docs/tokenizer.md.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/json_input.h"
#include "microllm/core/error.h"
#include "microllm/io/chat_template.h"

namespace microllm::app {
namespace {

using json = nlohmann::json;

struct RenderChatOptions {
  std::string tokenizer;
  std::string messages_file;
  std::string requests_jsonl;
  std::string enable_thinking;  // "", "true" or "false"
  std::string date_string;
  std::string family;
  bool add_generation_prompt = false;
};

std::string read_text(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  MICROLLM_CHECK(in.good(), "render-chat", "cannot read ", option, " ", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const std::string& text, const std::string& where) {
  return apps::parse_json(text, "render-chat", where);
}

// Per-request fields of a --requests-jsonl line override the command-line defaults.
io::ChatOptions request_options(const json& request, io::ChatOptions options,
                                const std::string& where) {
  const auto field = [&](const char* key, auto check, const char* expected) {
    if (!request.contains(key) || request[key].is_null()) return false;
    MICROLLM_CHECK(check(request[key]), "render-chat", where, ": \"", key, "\" must be ", expected);
    return true;
  };
  const auto is_bool = [](const json& v) { return v.is_boolean(); };
  const auto is_string = [](const json& v) { return v.is_string(); };
  if (field("add_generation_prompt", is_bool, "true or false"))
    options.add_generation_prompt = request["add_generation_prompt"].get<bool>();
  if (field("enable_thinking", is_bool, "true or false"))
    options.enable_thinking = request["enable_thinking"].get<bool>();
  if (field("date_string", is_string, "a string"))
    options.date_string = request["date_string"].get<std::string>();
  return options;
}

int run_render_chat(const RenderChatOptions& o) {
  std::optional<io::ChatFamily> family;
  if (!o.family.empty()) family = io::chat_family_from_name(o.family);
  const io::TokenizerConfig config = io::read_tokenizer_config(o.tokenizer);
  const io::ChatTemplate chat = io::ChatTemplate::from_config(config, o.tokenizer, family);

  io::ChatOptions defaults;
  defaults.add_generation_prompt = o.add_generation_prompt;
  if (!o.enable_thinking.empty()) defaults.enable_thinking = o.enable_thinking == "true";
  if (!o.date_string.empty()) defaults.date_string = o.date_string;

  if (!o.messages_file.empty()) {
    const json messages = parse_json(read_text(o.messages_file, "--messages"), o.messages_file);
    const std::string prompt =
        chat.render(io::chat_messages_from_json(messages, o.messages_file), defaults);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  }
  std::ifstream in(o.requests_jsonl, std::ios::binary);
  MICROLLM_CHECK(in.good(), "render-chat", "cannot read --requests-jsonl ", o.requests_jsonl);
  std::string line, out;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    const std::string where = o.requests_jsonl + ":" + std::to_string(number);
    const json request = parse_json(line, where);
    MICROLLM_CHECK(request.is_object() && request.contains("messages"), "render-chat", where,
                   ": expected an object with \"messages\"");
    const std::string prompt = chat.render(io::chat_messages_from_json(request["messages"], where),
                                           request_options(request, defaults, where));
    out += json(prompt).dump(-1, ' ', false, json::error_handler_t::strict);
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

// Adds `render-chat` under `tokenizer` (registered by tokenizer_command.cpp).
Command add_tokenizer_render_chat_command(CLI::App& tokenizer_app) {
  auto o = std::make_shared<RenderChatOptions>();
  CLI::App* cmd = tokenizer_app.add_subcommand(
      "render-chat",
      "Render chat messages with the model's chat template (as HF "
      "apply_chat_template(tokenize=False)); prints the prompt without a newline");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "directory holding tokenizer_config.json, a tokenizer.json beside one, or the "
                  "tokenizer_config.json itself")
      ->required();
  CLI::Option* messages = cmd->add_option(
      "--messages", o->messages_file,
      "JSON file with the list of {\"role\": system|user|assistant, \"content\": \"...\"}");
  CLI::Option* requests = cmd->add_option(
      "--requests-jsonl", o->requests_jsonl,
      "file of one {\"messages\": [...], \"add_generation_prompt\": bool, \"enable_thinking\": "
      "bool, \"date_string\": \"...\"} per line; prints one JSON string per line");
  messages->excludes(requests);
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt,
                "end with the assistant header, ready for generation");
  cmd->add_option("--enable-thinking", o->enable_thinking,
                  "Qwen3: false appends an empty <think></think> (default: not passed)")
      ->check(CLI::IsMember({"true", "false"}));
  cmd->add_option("--date-string", o->date_string,
                  "Llama 3.1/3.2: the 'Today Date' (default: the template's, see docs)");
  cmd->add_option(
      "--template-family", o->family,
      "use this family instead of recognising the template: " + io::chat_family_names());
  cmd->callback([messages, requests] {
    if (messages->count() == 0 && requests->count() == 0)
      throw CLI::RequiredError("--messages or --requests-jsonl");
  });
  return {cmd, [o] { return run_render_chat(*o); }};
}

}  // namespace microllm::app
