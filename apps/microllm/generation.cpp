// Shared by generate and chat (see generation.h).
#include "generation.h"

#include "common/json_input.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "microllm/infer/generation_config.h"
#include "microllm/serve/text_stream.h"

namespace microllm::app {

std::string default_model_folder() { return MICROLLM_DEFAULT_MODEL_DIR; }

void resolve_model_folder(GenerationFlags& f, const char* command) {
  f.default_model = false;
  if (!f.model.empty()) return;
  const char* env = std::getenv("MICROLLM_MODEL");
  if (env != nullptr && *env != '\0') {
    f.model = env;
    return;
  }
  f.model = default_model_folder();
  f.default_model = true;
  MICROLLM_CHECK(std::filesystem::exists(std::filesystem::path(f.model) / "config.json"), command,
                 "no --model given and MICROLLM_MODEL is unset, so the default model was "
                 "expected at '",
                 f.model,
                 "', which holds no config.json (models/ of the source tree this "
                 "microllm was built from); pass --model DIR");
}

void add_model_options(CLI::App& cmd, GenerationFlags& f) {
  cmd.add_option("--model", f.model,
                 "Hugging Face style folder (config.json + safetensors); default: "
                 "$MICROLLM_MODEL, else the default model " +
                     default_model_folder());
  cmd.add_option("--device", f.device, "cpu or cuda[:N]")->capture_default_str();
  cmd.add_option("--dtype", f.dtype, "compute dtype: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd.add_option("--kv-dtype", f.kv_dtype, "KV cache dtype: f32 or bf16 (default: --dtype)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd.add_option("--kv-memory", f.kv_memory_gib,
                 "KV cache size in GiB (default: 90% of free memory on CUDA)");
  cmd.add_option("--block-size", f.block_size, "tokens per KV block")->capture_default_str();
  cmd.add_option("--prefill-chunk", f.prefill_chunk, "prompt tokens of one sequence per step")
      ->capture_default_str();
  cmd.add_flag("--no-cuda-graphs", f.no_cuda_graphs,
               "CUDA: launch every decode step's kernels one by one (same tokens; for debugging)");
  cmd.add_flag("--no-prefix-caching", f.no_prefix_caching,
               "compute every prompt whole instead of reusing the KV blocks of cached prefixes "
               "(same tokens)");
}

void add_generation_options(CLI::App& cmd, GenerationFlags& f) {
  add_model_options(cmd, f);
  cmd.add_option("--max-new-tokens", f.max_new_tokens,
                 "tokens to generate at most (default: generation_config.json, else 256)");
  cmd.add_option("--temperature", f.temperature,
                 "0 = greedy (default: generation_config.json, else 1)");
  cmd.add_option("--top-k", f.top_k, "keep the k most likely tokens; 0 = off");
  cmd.add_option("--top-p", f.top_p, "nucleus sampling mass in (0, 1]; 1 = off");
  cmd.add_option("--min-p", f.min_p, "drop tokens below min-p × the top probability; 0 = off");
  cmd.add_option("--repetition-penalty", f.repetition_penalty,
                 "Hugging Face repetition penalty over prompt and output; 1 = off");
  cmd.add_option("--frequency-penalty", f.frequency_penalty, "OpenAI frequency penalty")
      ->capture_default_str();
  cmd.add_option("--presence-penalty", f.presence_penalty, "OpenAI presence penalty")
      ->capture_default_str();
  cmd.add_option("--seed", f.seed, "per-request sampling seed")->capture_default_str();
  cmd.add_option("--stop", f.stop, "stop string (repeatable); not included in the output");
  cmd.add_option("--stop-token-id", f.stop_token_ids,
                 "stop after generating this token id (repeatable; kept in the output ids)");
  cmd.add_option("--logprobs", f.logprobs, "also report the top N logprobs per token (N ≤ 20)");
}

GenerationModel load_generation_model(const GenerationFlags& f) {
  namespace fs = std::filesystem;
  MICROLLM_CHECK(fs::is_directory(f.model), "generate", "--model must be a model folder, found ",
                 fs::exists(f.model) ? "a file" : "nothing", " at '", f.model, "'");
  MICROLLM_CHECK(fs::exists(fs::path(f.model) / "config.json"), "generate", "model folder '",
                 f.model, "' has no config.json");
  GenerationModel m;
  const Device device = Device::parse(f.device);
  m.weights = std::make_shared<const model::ModelWeights>(
      model::ModelWeights::load(f.model, device, dtype_from_name(f.dtype)));
  if (fs::exists(fs::path(f.model) / "tokenizer.json"))
    m.tokenizer = io::Tokenizer::from_file(f.model);
  // generation_config.json as transformers reads it; without one, transformers builds the
  // generation defaults from config.json's keys (GenerationConfig.from_model_config).
  const fs::path gen_path = fs::path(f.model) / "generation_config.json";
  const fs::path source = fs::exists(gen_path) ? gen_path : fs::path(f.model) / "config.json";
  const infer::GenerationConfig gen = infer::GenerationConfig::from_json(
      apps::read_json_file(source.string(), "generate"), source.string());
  infer::SamplingParams base;
  base.max_new_tokens = 256;
  m.defaults = infer::defaults_from(gen, base);
  m.eos_token_ids =
      infer::merge_eos_token_ids(gen.eos_token_ids, m.weights->config().eos_token_ids);
  return m;
}

infer::SamplingParams sampling_params(const GenerationFlags& f, const GenerationModel& m) {
  infer::SamplingParams p = m.defaults;
  if (f.temperature) p.temperature = static_cast<float>(*f.temperature);
  if (f.top_k) p.top_k = static_cast<int32_t>(*f.top_k);
  if (f.top_p) p.top_p = static_cast<float>(*f.top_p);
  if (f.min_p) p.min_p = static_cast<float>(*f.min_p);
  if (f.repetition_penalty) p.repetition_penalty = static_cast<float>(*f.repetition_penalty);
  p.frequency_penalty = static_cast<float>(f.frequency_penalty);
  p.presence_penalty = static_cast<float>(f.presence_penalty);
  p.seed = f.seed;
  if (f.max_new_tokens) p.max_new_tokens = *f.max_new_tokens;
  p.logprobs = static_cast<int32_t>(f.logprobs);
  p.stop_token_ids = f.stop_token_ids;
  infer::validate(p);
  return p;
}

infer::EngineOptions engine_options(const GenerationFlags& f, const GenerationModel& m,
                                    int64_t num_prompts) {
  infer::EngineOptions o;
  o.kv_dtype = dtype_from_name(f.kv_dtype.empty() ? f.dtype : f.kv_dtype);
  o.block_size = f.block_size;
  MICROLLM_CHECK(f.kv_memory_gib >= 0.0, "generate", "--kv-memory must be ≥ 0 GiB, found ",
                 f.kv_memory_gib);
  o.kv_memory_bytes = static_cast<int64_t>(f.kv_memory_gib * 1024.0 * 1024.0 * 1024.0);
  o.max_num_seqs = std::max<int64_t>(num_prompts, 1);
  o.prefill_chunk = f.prefill_chunk;
  o.max_num_batched_tokens = std::max<int64_t>(f.prefill_chunk, o.max_num_seqs);
  o.eos_token_ids = m.eos_token_ids;
  o.cuda_graphs = !f.no_cuda_graphs;
  o.prefix_caching = !f.no_prefix_caching;
  return o;
}

std::vector<Completion> run_completions(
    infer::Engine& engine, const io::Tokenizer* tokenizer,
    const std::vector<std::vector<int32_t>>& prompts, const infer::SamplingParams& params,
    const std::vector<std::string>& stop,
    const std::function<void(size_t, const std::string&)>& on_text, GenerationTiming* timing) {
  MICROLLM_CHECK(stop.empty() || tokenizer, "generate",
                 "--stop needs a tokenizer, and the model folder has no tokenizer.json");
  std::vector<Completion> out(prompts.size());
  std::vector<std::unique_ptr<serve::TextStream>> streams(prompts.size());
  std::map<int64_t, size_t> index_of;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out[i].prompt_ids = prompts[i];
    index_of[engine.add_request(prompts[i], params)] = i;
    if (tokenizer) streams[i] = std::make_unique<serve::TextStream>(*tokenizer, stop);
  }
  const auto start = std::chrono::steady_clock::now();
  bool first = true;
  while (engine.has_unfinished()) {
    for (const infer::TokenOutput& t : engine.step()) {
      if (first && timing)
        timing->first_token_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      first = false;
      const size_t i = index_of.at(t.request_id);
      Completion& c = out[i];
      c.ids.push_back(t.token);
      c.tokens.push_back(t);
      if (timing) ++timing->generated_tokens;
      bool done = t.finished;
      if (t.finished) c.finish_reason = t.finish_reason;
      if (streams[i]) {
        const std::string piece = streams[i]->push(t.token);
        c.text += piece;
        if (on_text && !piece.empty()) on_text(i, piece);
        if (streams[i]->stopped()) {
          // A stop string completed: the text ends before it and the request ends here.
          if (!t.finished) engine.abort(t.request_id);
          c.finish_reason = "stop";
          done = true;
        }
        if (done && !streams[i]->stopped()) {
          const std::string rest = streams[i]->finish();
          c.text += rest;
          if (on_text && !rest.empty()) on_text(i, rest);
        }
      }
      if (done) index_of.erase(t.request_id);
    }
  }
  if (timing)
    timing->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace microllm::app
