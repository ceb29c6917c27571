// GenerationConfig: a checkpoint's generation defaults, read from an already-parsed
// generation_config.json object as transformers reads it, and the SamplingParams they imply.
//
// Reference: transformers GenerationConfig (generation/configuration_utils.py: the defaults
// of __init__) and GenerationMixin._get_logits_processor (which processors and warpers a
// config turns on). What transformers does, and so what defaults_from does:
//   - an absent field takes transformers' default: do_sample false, temperature 1.0,
//     top_k 50, top_p 1.0, min_p None, repetition_penalty 1.0;
//   - a field written as null is None: that processor or warper is off;
//   - do_sample false is greedy whatever temperature / top_k / top_p / min_p say (transformers
//     only warns); the repetition penalty still applies (it is a processor, not a warper);
//   - do_sample true needs temperature > 0 (TemperatureLogitsWarper raises otherwise),
//     top_k ≥ 0, top_p in [0, 1] (0 keeps the one most likely token: greedy), min_p in [0, 1],
//     repetition_penalty > 0.
// Without a generation_config.json transformers builds the config from config.json's keys
// (GenerationConfig.from_model_config): pass config.json's object to from_json then.
// max_length is not read: it counts the prompt, and a request states max_new_tokens.
//
// EOS ids (merge_eos_token_ids): transformers stops on generation_config.eos_token_id alone
// when generation_config.json exists (from_pretrained replaces the model config's values
// with the file's, it does not merge them) and on config.json's otherwise. microllm stops
// on the union, generation_config's ids first: for the supported checkpoints the file's list
// already contains config.json's (Qwen2.5 / Qwen3 instruct: [151645, 151643] ⊇ 151645;
// Llama 3.x instruct: the same list in both), so the union is transformers' list; where a
// file lacks config.json's id, stopping on it too is the safer choice (vLLM also adds the
// tokenizer's EOS). docs/inference.md, "Stopping".
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "microllm/infer/sampling_params.h"

namespace microllm::infer {

struct GenerationConfig {
  bool do_sample = false;                          // false: greedy
  std::optional<double> temperature = 1.0;         // nullopt: None (no temperature warper)
  std::optional<int64_t> top_k = 50;               // nullopt or 0: off
  std::optional<double> top_p = 1.0;               // nullopt or 1: off
  std::optional<double> min_p;                     // nullopt: off (transformers' default None)
  std::optional<double> repetition_penalty = 1.0;  // nullopt or 1: off
  std::optional<int64_t> max_new_tokens;           // nullopt: keep the caller's default
  std::vector<int64_t> eos_token_ids;              // int or list in the file; empty when absent
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::string source = "generation_config.json";  // names the origin in errors

  // Reads the fields above from a JSON object and ignores every other key (as
  // transformers keeps unknown keys without using them). Throws microllm::Error
  // (op "generation config") naming `where` and the field when it is not an object or a
  // field has the wrong type (a number for temperature, an integer for top_k, ...).
  static GenerationConfig from_json(const nlohmann::json& object, const std::string& where);
};

// The SamplingParams transformers' generate() would use with this config: sampling fields
// from the config by the rules above, the others (seed, stop ids, logprobs, ...) from
// `base`; max_new_tokens from the config when present. Throws microllm::Error
// (op "generation config") for a value transformers would reject, and validates the result.
SamplingParams defaults_from(const GenerationConfig& config, const SamplingParams& base = {});

// The EOS ids to stop on: `generation_config_eos` in order, then those of `model_config_eos`
// (config.json) not already listed. Throws microllm::Error (op "generation config") for an
// id outside [0, 2^31).
std::vector<int32_t> merge_eos_token_ids(std::span<const int64_t> generation_config_eos,
                                         std::span<const int64_t> model_config_eos);

}  // namespace microllm::infer
