// `microllm inspect (--config PATH | --model DIR) [--json] [--context N]`: what a model
// configuration implies, computed from config.json alone (no weights are allocated):
// parameter count, bytes per dtype, KV-cache bytes per token, FLOPs per token. With --model,
// also the folder's identity (microllm/model/identity.h): a SHA-256 over the canonical config,
// the tokenizer and every tensor.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "microllm/core/error.h"
#include "microllm/model/config.h"
#include "microllm/model/identity.h"

namespace microllm::app {
namespace {

struct InspectOptions {
  std::string config, model;
  bool json = false;
  int64_t context = 2048;  // context length for the attention part of FLOPs per token
};

// 494032768 → "494,032,768"
std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

int run_inspect(const InspectOptions& o) {
  MICROLLM_CHECK(o.config.empty() != o.model.empty(), "inspect",
                 "give exactly one of --config and --model");
  const std::string& source = o.config.empty() ? o.model : o.config;
  const model::ModelConfig c = model::ModelConfig::load(source);
  std::optional<model::ModelIdentity> identity;
  if (!o.model.empty()) identity = model::model_identity(o.model);
  const int64_t params = model::parameter_count(c);
  const double flops = model::forward_flops_per_token(c, o.context);
  nlohmann::ordered_json j;
  j[o.model.empty() ? "config" : "model"] = source;
  j["model_type"] = c.model_type();
  j["layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["heads"] = c.num_heads;
  j["kv_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["parameters"] = params;
  j["bytes"] = {{"f32", params * 4}, {"bf16", params * 2}, {"f16", params * 2}, {"f8", params}};
  j["kv_cache_bytes_per_token"] = {{"f32", model::kv_cache_bytes_per_token(c, 4)},
                                   {"bf16", model::kv_cache_bytes_per_token(c, 2)}};
  j["context"] = o.context;
  j["forward_flops_per_token"] = flops;
  j["training_flops_per_token"] = 3.0 * flops;
  if (identity) {
    j["identity"] = identity->sha256;
    j["tensors"] = identity->tensors;
    j["tensor_bytes"] = identity->tensor_bytes;
    j["tokenizer"] = identity->has_tokenizer;
  }
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "%s: %s, %lld layers, hidden %lld, FFN %lld, %lld heads / %lld KV heads of %lld, vocab "
      "%lld%s\n",
      source.c_str(), c.model_type(), static_cast<long long>(c.num_layers),
      static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
      static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
      static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
      c.tie_word_embeddings ? ", tied embeddings" : "");
  std::printf("parameters:               %s\n", with_commas(params).c_str());
  std::printf("weights:                  f32 %s bytes, bf16/f16 %s bytes, f8 %s bytes\n",
              with_commas(params * 4).c_str(), with_commas(params * 2).c_str(),
              with_commas(params).c_str());
  std::printf("KV cache per token:       bf16 %s bytes, f32 %s bytes\n",
              with_commas(model::kv_cache_bytes_per_token(c, 2)).c_str(),
              with_commas(model::kv_cache_bytes_per_token(c, 4)).c_str());
  std::printf("forward FLOPs per token:  %.4g at context %lld (training ≈ 3×: %.4g)\n", flops,
              static_cast<long long>(o.context), 3.0 * flops);
  if (identity) {
    std::printf("tensors:                  %lld, %s bytes%s\n",
                static_cast<long long>(identity->tensors),
                with_commas(static_cast<int64_t>(identity->tensor_bytes)).c_str(),
                identity->has_tokenizer ? ", with tokenizer.json" : ", no tokenizer.json");
    std::printf("identity:                 %s\n", identity->sha256.c_str());
  }
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "inspect",
      "Parameter count, bytes, KV-cache size and FLOPs of a config.json; a model folder's "
      "identity");
  cmd->add_option("--config", o->config, "config.json or a folder holding one");
  cmd->add_option("--model", o->model,
                  "model folder: its config, plus the identity hash over config, tokenizer and "
                  "tensors");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--context", o->context, "context length for attention FLOPs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {cmd, [o] { return run_inspect(*o); }};
}

}  // namespace microllm::app
