// `microllm inspect --config PATH [--json] [--context N]`: what a model configuration
// implies, computed from config.json alone (no weights are allocated): parameter count,
// bytes per dtype, KV-cache bytes per token, FLOPs per token.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "microllm/model/config.h"

namespace microllm::app {
namespace {

struct InspectOptions {
  std::string config;
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
  const model::ModelConfig c = model::ModelConfig::load(o.config);
  const int64_t params = model::parameter_count(c);
  const double flops = model::forward_flops_per_token(c, o.context);
  nlohmann::ordered_json j;
  j["config"] = o.config;
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
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "%s: %s, %lld layers, hidden %lld, FFN %lld, %lld heads / %lld KV heads of %lld, vocab "
      "%lld%s\n",
      o.config.c_str(), c.model_type(), static_cast<long long>(c.num_layers),
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
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "inspect", "Parameter count, bytes, KV-cache size and FLOPs of a config.json");
  cmd->add_option("--config", o->config, "config.json or a folder holding one")->required();
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_option("--context", o->context, "context length for attention FLOPs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {cmd, [o] { return run_inspect(*o); }};
}

}  // namespace microllm::app
