// microllm_bench_generate: decode and prefill throughput of the inference engine on random
// weights (a config.json shape), greedy, every sequence decoding exactly --new-tokens tokens
// (EOS ignored). Writes one JSON document (--out) that bench/generate/run_generate_bench.py
// pairs with the PyTorch peers into records.
//
// Per repetition: B requests of C random prompt ids are added, then the engine steps until
// all finish. prefill_ms is the time until every prompt has its first token (the prompts
// are prefilled in as few steps as the token budget allows); ttft_ms the time to the first
// sampled token of the batch; decode_tokens_per_s = B·(T−1) / (time from the last prompt's
// first token to the end). host_ms_per_step is the engine's host time per step (outside the
// device wait), launch_ms_per_step the part of it spent uploading a step's inputs and
// launching its work (the CUDA calls of a graph replay or of the eager launches). kernels_per_step
// counts the nodes of a decode step's CUDA graph (with
// --no-cuda-graphs, of one capture of the eager step: the same kernels, launched one by
// one). Warm-up repetitions run first and are not recorded.
// `switches` lists the MICROLLM_* environment switches that were set (they choose kernels).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "../kernel_switches.h"
#include "microllm/autograd/node.h"
#include "microllm/infer/engine.h"
#include "microllm/infer/kv_cache.h"
#include "microllm/model/weights.h"
#if MICROLLM_WITH_CUDA
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/runtime.h"
#endif

namespace {

// The kernel switches that were set, as a JSON object (bench/kernel_switches.h).
nlohmann::json kernel_switches() {
  nlohmann::json switches = nlohmann::json::object();
  for (const auto& [name, value] : microllm::bench::kernel_switches()) switches[name] = value;
  return switches;
}

using namespace microllm;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string config, out, device = "cuda", dtype = "bf16", kv_dtype;
  int64_t batch = 1, context = 8, new_tokens = 128, warmup = 1, reps = 3, seed = 0;
  double kv_memory_gib = 0.0;
  bool no_cuda_graphs = false;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What one decode step must read, for the achieved-bandwidth figure: every weight but an
// untied embedding table (only B rows of it are gathered), and the K/V of each sequence at
// its mean visible length over the decode steps (context + new_tokens / 2).
nlohmann::json decode_bytes(const model::ModelConfig& c, const model::ModelWeights& w,
                            const infer::EngineOptions& eo, const Options& o) {
  auto weights = static_cast<double>(w.flat().nbytes());
  if (!c.tie_word_embeddings) weights -= static_cast<double>(w.embed().nbytes());
  const double kv_es = eo.kv_dtype == DType::BF16 ? 2.0 : 4.0;
  const double mean_keys = static_cast<double>(o.context) + static_cast<double>(o.new_tokens) / 2;
  const double kv = static_cast<double>(o.batch) * mean_keys * static_cast<double>(c.num_layers) *
                    2.0 * static_cast<double>(c.num_kv_heads * c.head_dim) * kv_es;
  return {{"weights", weights},
          {"kv", kv},
          {"total", weights + kv},
          {"definition",
           "weights read per step (all but an untied embedding table) + K/V of every sequence at "
           "its mean visible length context + new_tokens / 2"}};
}

int run(const Options& o) {
  autograd::NoGradGuard no_grad;
  const Device device = Device::parse(o.device);
  const model::ModelConfig config = model::ModelConfig::load(o.config);
  auto weights = std::make_shared<const model::ModelWeights>(model::ModelWeights::random(
      config, device, dtype_from_name(o.dtype), static_cast<uint64_t>(o.seed)));
  infer::EngineOptions eo;
  eo.kv_dtype = dtype_from_name(o.kv_dtype.empty() ? o.dtype : o.kv_dtype);
  eo.max_num_seqs = o.batch;
  eo.max_model_len = o.context + o.new_tokens + 16;
  eo.max_num_batched_tokens = std::max<int64_t>(o.batch * o.context, o.batch);
  eo.prefill_chunk = o.context;
  eo.cuda_graphs = !o.no_cuda_graphs;
  eo.kv_memory_bytes = o.kv_memory_gib > 0
                           ? static_cast<int64_t>(o.kv_memory_gib * (1ll << 30))
                           : infer::KvCache::bytes_per_block(config, eo.kv_dtype, eo.block_size) *
                                 o.batch * ((eo.max_model_len + eo.block_size - 1) / eo.block_size);
  infer::Engine engine(weights, eo);

  std::mt19937_64 rng(static_cast<uint64_t>(o.seed) + 1);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
  nlohmann::json samples = {{"decode_tokens_per_s", nlohmann::json::array()},
                            {"prefill_ms", nlohmann::json::array()},
                            {"ttft_ms", nlohmann::json::array()},
                            {"host_ms_per_step", nlohmann::json::array()},
                            {"launch_ms_per_step", nlohmann::json::array()}};
  for (int64_t rep = 0; rep < o.warmup + o.reps; ++rep) {
    infer::SamplingParams params;
    params.temperature = 0.0f;
    params.max_new_tokens = o.new_tokens;
    params.ignore_eos = true;
    for (int64_t b = 0; b < o.batch; ++b) {
      std::vector<int32_t> prompt(static_cast<size_t>(o.context));
      for (int32_t& id : prompt) id = token(rng);
      engine.add_request(std::move(prompt), params);
    }
    const infer::EngineStats before = engine.stats();
    const Clock::time_point start = Clock::now();
    double ttft = -1.0, prefilled = -1.0;
    std::set<int64_t> started;
    while (engine.has_unfinished()) {
      for (const infer::TokenOutput& t : engine.step()) {
        if (ttft < 0) ttft = seconds_since(start);
        started.insert(t.request_id);
      }
      if (prefilled < 0 && static_cast<int64_t>(started.size()) == o.batch)
        prefilled = seconds_since(start);
    }
    const double total = seconds_since(start);
    const infer::EngineStats after = engine.stats();
    if (rep < o.warmup) continue;
    const double decode_seconds = total - prefilled;
    samples["decode_tokens_per_s"].push_back(
        decode_seconds > 0 ? static_cast<double>(o.batch * (o.new_tokens - 1)) / decode_seconds
                           : 0.0);
    samples["prefill_ms"].push_back(prefilled * 1e3);
    samples["ttft_ms"].push_back(ttft * 1e3);
    const int64_t steps = after.steps - before.steps;
    auto per_step_ms = [&](double seconds) {
      return steps > 0 ? seconds * 1e3 / static_cast<double>(steps) : 0.0;
    };
    samples["host_ms_per_step"].push_back(per_step_ms(after.host_seconds - before.host_seconds));
    samples["launch_ms_per_step"].push_back(
        per_step_ms(after.launch_seconds - before.launch_seconds));
  }
  nlohmann::json doc = {{"schema", "microllm-bench-generate-v1"},
                        {"config",
                         {{"model", o.config},
                          {"dtype", o.dtype},
                          {"kv_dtype", eo.kv_dtype == DType::BF16 ? "bf16" : "f32"},
                          {"device", o.device},
                          {"batch", o.batch},
                          {"context", o.context},
                          {"new_tokens", o.new_tokens},
                          {"warmup", o.warmup},
                          {"reps", o.reps},
                          {"block_size", eo.block_size},
                          {"cuda_graphs", device.is_cuda() && eo.cuda_graphs}}},
                        {"switches", kernel_switches()},
                        {"samples", samples},
                        {"kv_bytes", engine.kv_cache_bytes()},
                        {"weight_bytes", static_cast<int64_t>(weights->flat().nbytes())},
                        {"decode_bytes_per_step", decode_bytes(config, *weights, eo, o)},
                        {"kernels_per_step",
                         device.is_cuda() ? nlohmann::json(engine.kernels_per_decode_step(o.batch))
                                          : nlohmann::json(nullptr)}};
#if MICROLLM_WITH_CUDA
  if (device.is_cuda())
    doc["peak_memory_bytes"] = cuda::allocator_stats(device).peak_allocated_bytes;
#endif
  std::ofstream(o.out) << doc.dump(1) << "\n";
  std::printf("%s\n", samples.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"microllm_bench_generate: engine prefill and decode throughput on random weights"};
  Options o;
  app.add_option("--config", o.config, "config.json (or a folder holding one)")->required();
  app.add_option("--out", o.out, "JSON document to write")->required();
  app.add_option("--device", o.device)->capture_default_str();
  app.add_option("--dtype", o.dtype)->capture_default_str();
  app.add_option("--kv-dtype", o.kv_dtype);
  app.add_option("--batch", o.batch)->capture_default_str();
  app.add_option("--context", o.context, "prompt length")->capture_default_str();
  app.add_option("--new-tokens", o.new_tokens)->capture_default_str();
  app.add_option("--warmup", o.warmup)->capture_default_str();
  app.add_option("--reps", o.reps)->capture_default_str();
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--kv-memory", o.kv_memory_gib, "KV cache GiB (default: what the batch needs)");
  app.add_flag("--no-cuda-graphs", o.no_cuda_graphs, "launch decode steps eagerly");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "microllm_bench_generate: error: %s\n", e.what());
    return 1;
  }
}
