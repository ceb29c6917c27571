// `microllm generate --model DIR (--prompt TEXT | --prompt-ids "[1,2,3]" | --prompts FILE)`:
// continues one prompt or a batch of prompts (all run together, as one batch) with the
// inference engine. Text streams to stdout as it is generated; with --json, one object per
// prompt in input order: {"index", "prompt_ids", "ids", "text", "finish_reason",
// "logprobs"?}. Tokens/s and time to first token go to stderr.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "common/json_input.h"
#include "generation.h"

namespace microllm::app {
namespace {

using json = nlohmann::json;

struct GenerateCli {
  GenerationFlags flags;
  std::string prompt, prompt_ids, prompts_file;
  bool json_output = false;
};

std::vector<int32_t> ids_from_json(const json& value, const std::string& where) {
  MICROLLM_CHECK(value.is_array() && !value.empty(), "generate", where,
                 ": prompt ids must be a non-empty JSON array of integers");
  std::vector<int32_t> ids;
  for (const json& v : value) {
    MICROLLM_CHECK(v.is_number_integer(), "generate", where,
                   ": prompt ids must be integers, found ", v.dump());
    const int64_t id = v.get<int64_t>();
    MICROLLM_CHECK(id >= 0 && id <= INT32_MAX, "generate", where, ": prompt id ", id,
                   " is negative or too large");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

json parse_json(const std::string& text, const std::string& where) {
  return apps::parse_json(text, "generate", where);
}

std::vector<int32_t> encode(const GenerationModel& m, const std::string& text,
                            const std::string& where) {
  MICROLLM_CHECK(m.tokenizer.has_value(), "generate", where,
                 ": a text prompt needs a tokenizer, and the model folder has no "
                 "tokenizer.json (give token ids instead)");
  std::vector<int32_t> ids = m.tokenizer->encode(text, /*add_special_tokens=*/true);
  MICROLLM_CHECK(!ids.empty(), "generate", where, ": the prompt encodes to no tokens");
  return ids;
}

std::vector<std::vector<int32_t>> read_prompts(const GenerateCli& cli, const GenerationModel& m) {
  const int given = !cli.prompt.empty() + !cli.prompt_ids.empty() + !cli.prompts_file.empty();
  MICROLLM_CHECK(given == 1, "generate",
                 "give exactly one of --prompt, --prompt-ids and --prompts, found ", given);
  if (!cli.prompt.empty()) return {encode(m, cli.prompt, "--prompt")};
  if (!cli.prompt_ids.empty())
    return {ids_from_json(parse_json(cli.prompt_ids, "--prompt-ids"), "--prompt-ids")};
  std::ifstream in(cli.prompts_file);
  MICROLLM_CHECK(in.good(), "generate", "cannot read --prompts file '", cli.prompts_file, "'");
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = cli.prompts_file + ":" + std::to_string(number);
    const json object = parse_json(line, where);
    MICROLLM_CHECK(
        object.is_object() && (object.contains("prompt") != object.contains("prompt_ids")),
        "generate", where, ": expected an object with one of \"prompt\" and \"prompt_ids\"");
    if (object.contains("prompt")) {
      MICROLLM_CHECK(object["prompt"].is_string(), "generate", where,
                     ": \"prompt\" must be a string");
      prompts.push_back(encode(m, object["prompt"].get<std::string>(), where));
    } else {
      prompts.push_back(ids_from_json(object["prompt_ids"], where));
    }
  }
  MICROLLM_CHECK(!prompts.empty(), "generate", cli.prompts_file, " holds no prompts");
  return prompts;
}

json logprobs_json(const Completion& c) {
  json tokens = json::array();
  for (const infer::TokenOutput& t : c.tokens) {
    json top = json::array();
    for (const auto& [id, lp] : t.top_logprobs) top.push_back({{"id", id}, {"logprob", lp}});
    tokens.push_back({{"id", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return tokens;
}

int run_generate(GenerateCli& cli) {
  resolve_model_folder(cli.flags, "generate");
  const GenerationModel m = load_generation_model(cli.flags);
  const std::vector<std::vector<int32_t>> prompts = read_prompts(cli, m);
  const infer::SamplingParams params = sampling_params(cli.flags, m);
  infer::Engine engine(m.weights,
                       engine_options(cli.flags, m, static_cast<int64_t>(prompts.size())));
  const bool stream = !cli.json_output && prompts.size() == 1 && m.tokenizer.has_value();
  GenerationTiming timing;
  const std::vector<Completion> out = run_completions(
      engine, m.tokenizer ? &*m.tokenizer : nullptr, prompts, params, cli.flags.stop,
      [&](size_t, const std::string& text) {
        if (!stream) return;
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      },
      &timing);
  for (size_t i = 0; i < out.size(); ++i) {
    const Completion& c = out[i];
    if (cli.json_output) {
      json object = {{"index", i},
                     {"prompt_ids", c.prompt_ids},
                     {"ids", c.ids},
                     {"text", c.text},
                     {"finish_reason", c.finish_reason}};
      if (params.logprobs >= 0) object["logprobs"] = logprobs_json(c);
      std::printf("%s\n", object.dump().c_str());
    } else if (stream) {
      std::printf("\n");
    } else if (m.tokenizer) {
      std::printf("[%zu] %s\n", i, c.text.c_str());
    } else {
      std::printf("[%zu] %s\n", i, json(c.ids).dump().c_str());
    }
  }
  std::fflush(stdout);
  const double decode_seconds = timing.seconds - timing.first_token_seconds;
  const int64_t decode_tokens = timing.generated_tokens - static_cast<int64_t>(out.size());
  std::fprintf(stderr,
               "generate: %lld tokens in %.3f s; time to first token %.1f ms; decode %.1f "
               "tokens/s\n",
               static_cast<long long>(timing.generated_tokens), timing.seconds,
               timing.first_token_seconds * 1e3,
               decode_seconds > 0 && decode_tokens > 0 ? decode_tokens / decode_seconds : 0.0);
  return 0;
}

}  // namespace

Command add_generate_command(CLI::App& parent) {
  auto c = std::make_shared<GenerateCli>();
  CLI::App* cmd = parent.add_subcommand("generate", "Continue prompts with a model");
  add_generation_options(*cmd, c->flags);
  cmd->add_option("--prompt", c->prompt, "prompt text (needs the folder's tokenizer)");
  cmd->add_option("--prompt-ids", c->prompt_ids, "prompt token ids as a JSON array");
  cmd->add_option("--prompts", c->prompts_file,
                  "JSONL file: {\"prompt\": ...} or {\"prompt_ids\": [...]} per line (one batch)");
  cmd->add_flag("--json", c->json_output, "one JSON object per prompt instead of text");
  return {cmd, [c] { return run_generate(*c); }};
}

}  // namespace microllm::app
