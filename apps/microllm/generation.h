// What `microllm generate` and `microllm chat` share: loading a model folder for
// generation (weights, optional tokenizer, generation_config.json), the sampling flags and
// how they override the folder's defaults, and running prompts through one Engine with
// streaming text and stop strings (the engine knows ids only; text sits here).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "microllm/infer/engine.h"
#include "microllm/io/tokenizer.h"

namespace microllm::app {

// A model folder opened for generation.
struct GenerationModel {
  std::shared_ptr<const model::ModelWeights> weights;
  std::optional<io::Tokenizer> tokenizer;  // when the folder has tokenizer.json
  infer::SamplingParams defaults;          // generation_config.json as transformers reads it
  std::vector<int32_t> eos_token_ids;      // generation_config.json ∪ config.json
};

// Flags shared by generate and chat. Unset optionals keep the folder's defaults.
struct GenerationFlags {
  std::string model, device = "cpu", dtype = "f32", kv_dtype;
  bool default_model = false;  // set by resolve_model_folder: no --model, no MICROLLM_MODEL
  double kv_memory_gib = 0.0;
  std::optional<int64_t> max_new_tokens;
  int64_t block_size = 16;
  int64_t prefill_chunk = 2048;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  double frequency_penalty = 0.0, presence_penalty = 0.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  int64_t logprobs = -1;
  bool no_cuda_graphs = false;
  bool no_prefix_caching = false;
};

// The folder of the default model (models/microllm-brown of the source tree, compiled in).
std::string default_model_folder();
// Fills flags.model when --model was not given: $MICROLLM_MODEL when set and non-empty, else
// the default model. Error (naming `command`) when the default model's folder is missing.
void resolve_model_folder(GenerationFlags& flags, const char* command);

// The model folder and engine flags (--model, --device, --dtype, --kv-dtype, --kv-memory,
// --block-size, --prefill-chunk, --no-cuda-graphs, --no-prefix-caching), shared by generate, chat
// and serve.
void add_model_options(CLI::App& cmd, GenerationFlags& flags);
// add_model_options plus the sampling flags of generate and chat.
void add_generation_options(CLI::App& cmd, GenerationFlags& flags);
GenerationModel load_generation_model(const GenerationFlags& flags);
// The folder's defaults with the flags applied; validated (one clear Error per bad value).
infer::SamplingParams sampling_params(const GenerationFlags& flags, const GenerationModel& model);
infer::EngineOptions engine_options(const GenerationFlags& flags, const GenerationModel& model,
                                    int64_t num_prompts);

// One finished completion.
struct Completion {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;   // generated tokens, the stopping EOS included
  std::string text;           // their decoding without special tokens, cut before a stop string
  std::string finish_reason;  // "stop" | "length"
  std::vector<infer::TokenOutput> tokens;  // per token: logprob and top logprobs
};

struct GenerationTiming {
  double seconds = 0.0;              // first step to last token
  double first_token_seconds = 0.0;  // first step to the first sampled token
  int64_t generated_tokens = 0;
};

// Runs every prompt as one batch; `on_text(index, text)` receives each piece of text as it
// becomes safe to show (stop strings held back). Stop strings need a tokenizer.
std::vector<Completion> run_completions(
    infer::Engine& engine, const io::Tokenizer* tokenizer,
    const std::vector<std::vector<int32_t>>& prompts, const infer::SamplingParams& params,
    const std::vector<std::string>& stop,
    const std::function<void(size_t, const std::string&)>& on_text, GenerationTiming* timing);

}  // namespace microllm::app
