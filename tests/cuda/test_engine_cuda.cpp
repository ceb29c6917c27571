// The inference engine on CUDA (label cuda): DecoderStep's logits equal the CPU reference
// Transformer (F32 within the CUDA contract; BF16 by relative L2); the CUDA engine's greedy
// tokens equal the CPU engine's (F32); a batch of up to 4 prompts generates what each prompt
// generates alone, greedy and seeded (bitwise: batch-invariant GEMMs for prefill rows, the
// decode GEMV for the decode rows and LM head of steps of ≤ 4 sequences), and prefix-cache
// hits give the bits of a whole prefill; CUDA-graph decode
// gives the bits of eager decode (buckets 1, 4, 16 with padded rows, logprobs, mixed
// sampling parameters, penalty rows that fall back to eager steps); an eager steady-state
// decode step makes one host→device copy, one device→host copy, one host synchronization
// and no allocation, a graph step one upload, one synchronization and no allocation;
// programmatic dependent launch gives the bits of plain launches; a decode step with the
// norms and residual adds fused into the GEMVs gives the bits of the separate operators.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "cuda/cuda_test_utils.h"
#include "infer/step_batch_builder.h"
#include "microllm/autograd/node.h"
#include "microllm/cuda/allocator.h"
#include "microllm/cuda/runtime.h"
#include "microllm/infer/engine.h"
#include "microllm/infer/kv_cache.h"
#include "microllm/model/decoder_step.h"
#include "microllm/model/transformer.h"

using namespace microllm;
using model::ModelConfig;
using model::ModelWeights;

namespace {

ModelConfig cuda_config(model::Family family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 1003;
  c.hidden_size = 128;
  c.intermediate_size = 320;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = family == model::Family::Qwen3 ? 128 : 64;  // CUDA attention: D 64 or 128
  c.max_position_embeddings = 512;
  c.qkv_bias = family == model::Family::Qwen2;
  c.qk_norm = family == model::Family::Qwen3;
  c.tie_word_embeddings = family != model::Family::Llama;
  return c;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

struct Generated {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top;  // [prompt][token]
  int64_t graph_steps = 0;
};

// Generates every prompt with its own parameters (params[i], or params[0] for all).
Generated generate(const std::shared_ptr<const ModelWeights>& w,
                   const std::vector<std::vector<int32_t>>& prompts,
                   const std::vector<infer::SamplingParams>& params, bool cuda_graphs = true) {
  infer::EngineOptions options;
  options.kv_memory_bytes = 64 << 20;
  options.prefill_chunk = 64;
  options.max_num_seqs = 16;
  options.cuda_graphs = cuda_graphs;
  infer::Engine engine(w, options);
  std::map<int64_t, size_t> index;
  auto params_of = [&](size_t i) -> const infer::SamplingParams& {
    return params[params.size() == 1 ? 0 : i];
  };
  for (size_t i = 0; i < prompts.size(); ++i)
    index[engine.add_request(prompts[i], params_of(i))] = i;
  Generated out;
  out.ids.resize(prompts.size());
  out.logprobs.resize(prompts.size());
  out.top.resize(prompts.size());
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step()) {
      const size_t i = index.at(t.request_id);
      out.ids[i].push_back(t.token);
      if (params_of(i).logprobs >= 0) out.logprobs[i].push_back(t.logprob);  // asked for
      out.top[i].push_back(t.top_logprobs);
    }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
  out.graph_steps = engine.stats().graph_steps;
  return out;
}

Generated generate(const std::shared_ptr<const ModelWeights>& w,
                   const std::vector<std::vector<int32_t>>& prompts,
                   const infer::SamplingParams& params, bool cuda_graphs = true) {
  return generate(w, prompts, std::vector<infer::SamplingParams>{params}, cuda_graphs);
}

// What one engine step moved: copies, host synchronizations, device allocations.
struct StepCost {
  int64_t h2d = 0, d2h = 0, syncs = 0, allocations = 0, backend_mallocs = 0;
};

std::vector<infer::TokenOutput> counted_step(infer::Engine& engine, StepCost& cost) {
  const cuda::TransferStats t0 = cuda::transfer_stats();
  const cuda::AllocatorStats a0 = cuda::allocator_stats(Device::cuda(0));
  std::vector<infer::TokenOutput> out = engine.step();
  const cuda::TransferStats t1 = cuda::transfer_stats();
  const cuda::AllocatorStats a1 = cuda::allocator_stats(Device::cuda(0));
  cost = {t1.h2d_calls - t0.h2d_calls, t1.d2h_calls - t0.d2h_calls,
          t1.host_synchronizations - t0.host_synchronizations, a1.allocations - a0.allocations,
          a1.backend_mallocs - a0.backend_mallocs};
  return out;
}

// Adds n sampled requests of 20, 21, ... random prompt ids, then runs `warm_steps` steps
// (prefill and the first decode steps).
void start_sampled_requests(infer::Engine& engine, const ModelConfig& c, uint64_t n,
                            int warm_steps) {
  infer::SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 40;
  params.max_new_tokens = 64;
  params.ignore_eos = true;
  for (uint64_t i = 0; i < n; ++i) engine.add_request(random_ids(20 + i, c.vocab_size, i), params);
  for (int i = 0; i < warm_steps; ++i) engine.step();
}

const model::Family kFamilies[] = {model::Family::Qwen2, model::Family::Llama,
                                   model::Family::Qwen3};

}  // namespace

TEST(EngineCuda, GreedyEqualsTheCpuEngineInF32) {
  MICROLLM_REQUIRE_CUDA();
  for (model::Family family : kFamilies) {
    const ModelConfig c = cuda_config(family);
    auto cpu = std::make_shared<const ModelWeights>(
        ModelWeights::random(c, Device::cpu(), DType::F32, 3, 0.1));
    auto gpu = std::make_shared<ModelWeights>(c, Device::cuda(0), DType::F32);
    Tensor(gpu->flat()).copy_from(cpu->flat());
    const std::vector<std::vector<int32_t>> prompts = {
        random_ids(1, c.vocab_size, 1), random_ids(37, c.vocab_size, 2),
        random_ids(130, c.vocab_size, 3)};  // 130 > prefill_chunk: chunked
    infer::SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.max_new_tokens = 16;
    greedy.logprobs = 0;  // the sampled tokens' logprobs are compared too
    const Generated a = generate(cpu, prompts, greedy);
    const Generated b = generate(gpu, prompts, greedy);
    EXPECT_EQ(a.ids, b.ids) << "family " << static_cast<int>(family);
    for (size_t i = 0; i < prompts.size(); ++i)
      for (size_t j = 0; j < std::min(a.logprobs[i].size(), b.logprobs[i].size()); ++j)
        EXPECT_NEAR(a.logprobs[i][j], b.logprobs[i][j], 5e-4);
  }
}

TEST(EngineCuda, BatchEqualsAloneBitwiseGreedyAndSeeded) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : {DType::F32, DType::BF16}) {
    const ModelConfig c = cuda_config(model::Family::Qwen2);
    auto w = std::make_shared<const ModelWeights>(
        ModelWeights::random(c, Device::cuda(0), dtype, 5, 0.1));
    // Four prompts: steps of at most 4 sequences take the decode GEMV in every step, alone
    // or together (DecoderStep); the 90-token prompt takes two prefill chunks of 64.
    std::vector<std::vector<int32_t>> prompts;
    for (uint64_t i = 0; i < 4; ++i)
      prompts.push_back(random_ids(3 + 29 * i, c.vocab_size, 10 + i));
    infer::SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.max_new_tokens = 12;
    greedy.logprobs = 0;  // the sampled tokens' logprobs are compared too
    infer::SamplingParams sampled = greedy;
    sampled.temperature = 0.9f;
    sampled.top_p = 0.95f;
    sampled.seed = 99;
    for (const infer::SamplingParams& params : {greedy, sampled}) {
      const Generated together = generate(w, prompts, params);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Generated alone = generate(w, {prompts[i]}, params);
        EXPECT_EQ(alone.ids[0], together.ids[i]) << dtype_name(dtype) << " prompt " << i;
        EXPECT_EQ(alone.logprobs[0], together.logprobs[i]) << dtype_name(dtype) << " prompt " << i;
      }
    }
  }
}

// Prompts that start with a cached prefix generate the ids and logprobs of a run without
// the cache, bit for bit (F32 and BF16, greedy and seeded; waves of at most 4 sequences,
// whose decode rows take the GEMV in either run): a wave of one, then four prompts sharing
// its first 40 ids, then the same four again (whole prompts cached but two tokens).
TEST(EngineCuda, PrefixCacheHitsGiveTheBitsOfAWholePrefill) {
  MICROLLM_REQUIRE_CUDA();
  for (DType dtype : {DType::F32, DType::BF16}) {
    const ModelConfig c = cuda_config(model::Family::Qwen2);
    auto w = std::make_shared<const ModelWeights>(
        ModelWeights::random(c, Device::cuda(0), dtype, 7, 0.1));
    const std::vector<int32_t> system = random_ids(40, c.vocab_size, 30);
    std::vector<std::vector<int32_t>> prompts;
    for (uint64_t i = 0; i < 4; ++i) {
      std::vector<int32_t> p = system;
      const std::vector<int32_t> tail = random_ids(1 + 11 * i, c.vocab_size, 40 + i);
      p.insert(p.end(), tail.begin(), tail.end());
      prompts.push_back(p);
    }
    infer::SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.max_new_tokens = 12;
    greedy.logprobs = 0;  // the sampled tokens' logprobs are compared too
    infer::SamplingParams sampled = greedy;
    sampled.temperature = 0.9f;
    sampled.top_p = 0.95f;
    sampled.seed = 99;
    for (const infer::SamplingParams& params : {greedy, sampled}) {
      Generated runs[2];
      int64_t hits[2] = {0, 0};
      for (const bool caching : {false, true}) {
        infer::EngineOptions options;
        options.kv_memory_bytes = 64 << 20;
        options.prefill_chunk = 64;
        options.max_num_seqs = 16;
        options.prefix_caching = caching;
        infer::Engine engine(w, options);
        Generated& out = runs[caching];
        for (const auto& wave : {std::vector<std::vector<int32_t>>{prompts[0]}, prompts, prompts}) {
          std::map<int64_t, size_t> index;
          for (const auto& p : wave) {
            index[engine.add_request(p, params)] = out.ids.size();
            out.ids.emplace_back();
            out.logprobs.emplace_back();
          }
          while (engine.has_unfinished())
            for (const infer::TokenOutput& t : engine.step()) {
              out.ids[index.at(t.request_id)].push_back(t.token);
              out.logprobs[index.at(t.request_id)].push_back(t.logprob);
            }
        }
        EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
        hits[caching] = engine.stats().prefix_cache_hits;
      }
      EXPECT_EQ(hits[0], 0);
      EXPECT_GE(hits[1], 3 * 32 + 4 * 32) << dtype_name(dtype);  // wave 2: 40 ids → 2 blocks
      EXPECT_EQ(runs[1].ids, runs[0].ids) << dtype_name(dtype);
      EXPECT_EQ(runs[1].logprobs, runs[0].logprobs) << dtype_name(dtype);
    }
  }
}

TEST(EngineCuda, Bf16StepIsCloseToTheF32Reference) {
  MICROLLM_REQUIRE_CUDA();
  autograd::NoGradGuard no_grad;
  const ModelConfig c = cuda_config(model::Family::Qwen3);
  const ModelWeights f32 = ModelWeights::random(c, Device::cpu(), DType::F32, 8, 0.1);
  const model::Transformer reference = model::Transformer::from_weights(f32);
  auto bf16 = std::make_shared<ModelWeights>(c, Device::cuda(0), DType::BF16);
  Tensor(bf16->flat()).copy_from(f32.flat());
  // The first generated token's logprob of a greedy BF16 run against the F32 reference.
  const std::vector<int32_t> prompt = random_ids(50, c.vocab_size, 4);
  infer::SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_new_tokens = 1;
  greedy.logprobs = 5;
  infer::EngineOptions options;
  options.kv_memory_bytes = 16 << 20;
  options.kv_dtype = DType::BF16;
  infer::Engine engine(bf16, options);
  engine.add_request(prompt, greedy);
  std::vector<infer::TokenOutput> out;
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step()) out.push_back(t);
  ASSERT_EQ(out.size(), 1u);
  std::vector<int64_t> wide(prompt.begin(), prompt.end());
  const Tensor logits =
      reference.forward(Tensor::from_vector(wide, {1, static_cast<int64_t>(prompt.size())}));
  const std::vector<float> last =
      logits.narrow(1, static_cast<int64_t>(prompt.size()) - 1, 1).to_vector_f32();
  // The BF16 top-5 ids are among the reference's top-10, and the argmax agrees.
  std::vector<int64_t> order(last.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return last[a] > last[b]; });
  EXPECT_EQ(out[0].token, order[0]);
  const std::set<int64_t> top10(order.begin(), order.begin() + 10);
  for (const auto& [id, lp] : out[0].top_logprobs) EXPECT_TRUE(top10.count(id)) << id;
}

TEST(EngineCuda, EagerSteadyDecodeStepIsOneCopyEachWayOneSyncNoAllocation) {
  MICROLLM_REQUIRE_CUDA();
  const ModelConfig c = cuda_config(model::Family::Llama);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cuda(0), DType::BF16, 2, 0.1));
  infer::EngineOptions options;
  options.kv_memory_bytes = 16 << 20;
  options.cuda_graphs = false;
  infer::Engine engine(w, options);
  start_sampled_requests(engine, c, 4, 6);
  StepCost cost;
  const std::vector<infer::TokenOutput> out = counted_step(engine, cost);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(cost.h2d, 1);
  EXPECT_EQ(cost.d2h, 1);
  EXPECT_EQ(cost.syncs, 1);
  EXPECT_EQ(cost.allocations, 0);
  EXPECT_EQ(cost.backend_mallocs, 0);
}

TEST(EngineCuda, GraphDecodeGivesTheBitsOfEagerDecode) {
  MICROLLM_REQUIRE_CUDA();
  for (model::Family family : kFamilies)
    for (DType dtype : {DType::F32, DType::BF16}) {
      const ModelConfig c = cuda_config(family);
      auto w = std::make_shared<const ModelWeights>(
          ModelWeights::random(c, Device::cuda(0), dtype, 6, 0.1));
      // 1, 3 and 11 prompts: graph buckets 1, 4 and 16, so padded rows run along.
      for (int64_t n : {1, 3, 11}) {
        std::vector<std::vector<int32_t>> prompts;
        std::vector<infer::SamplingParams> params;
        for (int64_t i = 0; i < n; ++i) {
          prompts.push_back(random_ids(2 + 13 * i, c.vocab_size, 100 + static_cast<uint64_t>(i)));
          infer::SamplingParams p;
          p.max_new_tokens = 10 + i % 4;  // sequences finish at different steps
          p.ignore_eos = true;
          p.temperature = i % 3 == 0 ? 0.0f : 0.8f;
          p.top_k = i % 2 == 0 ? 0 : 50;
          p.top_p = i % 4 == 1 ? 0.9f : 1.0f;
          p.min_p = i % 5 == 2 ? 0.05f : 0.0f;
          p.seed = 7 + static_cast<uint64_t>(i);
          // Steps replay each graph: without logprobs, with the sampled tokens', with the top.
          p.logprobs = i % 3 == 1 ? 3 : i % 3 == 2 ? 0 : -1;
          params.push_back(p);
        }
        const Generated graphs = generate(w, prompts, params, true);
        const Generated eager = generate(w, prompts, params, false);
        const std::string where = std::string(dtype_name(dtype)) + " family " +
                                  std::to_string(static_cast<int>(family)) + " batch " +
                                  std::to_string(n);
        EXPECT_GT(graphs.graph_steps, 0) << where;
        EXPECT_EQ(eager.graph_steps, 0) << where;
        EXPECT_EQ(graphs.ids, eager.ids) << where;
        EXPECT_EQ(graphs.logprobs, eager.logprobs) << where;
        EXPECT_EQ(graphs.top, eager.top) << where;
      }
    }
}

// A step of decode rows only runs the norms inside the GEMVs and the residual adds in their
// epilogues; an observer gets the separate operators. Both must give the same logits, bit
// for bit, and write the same cache.
TEST(EngineCuda, FusedDecodeStepGivesTheBitsOfTheSeparateOperators) {
  MICROLLM_REQUIRE_CUDA();
  for (model::Family family : kFamilies)
    for (DType dtype : {DType::F32, DType::BF16}) {
      const ModelConfig c = cuda_config(family);
      const ModelWeights w = ModelWeights::random(c, Device::cuda(0), dtype, 9, 0.1);
      model::DecoderStep step(w, {32, 4, 4, 4});
      infer::KvCache kv(c, Device::cuda(0), dtype, 4, 16);
      // Sequence b owns blocks [4b, 4b + 4) of 4 slots.
      const microllm::testing::Paging paging =
          microllm::testing::make_paging({16, 16, 16}, 4, 16, false);
      auto cuda_step = [&](const std::vector<std::vector<int32_t>>& news,
                           const std::vector<int64_t>& starts, int64_t decode_rows) {
        model::StepBatch s = microllm::testing::make_step(news, starts, paging, 4, Device::cuda(0));
        s.num_decode_rows = decode_rows;
        return s;
      };
      std::vector<std::vector<int32_t>> seqs = {random_ids(5, c.vocab_size, 1),
                                                random_ids(9, c.vocab_size, 2),
                                                random_ids(2, c.vocab_size, 3)};
      step.forward(cuda_step(seqs, {0, 0, 0}, 0), kv.layers());  // prefill, unfused
      for (int t = 0; t < 3; ++t) {
        std::vector<std::vector<int32_t>> news;
        std::vector<int64_t> starts;
        for (size_t b = 0; b < seqs.size(); ++b) {
          const auto next = static_cast<int32_t>((11 * t + 5 * b + 2) % c.vocab_size);
          starts.push_back(static_cast<int64_t>(seqs[b].size()));
          seqs[b].push_back(next);
          news.push_back({next});
        }
        const model::StepBatch batch = cuda_step(news, starts, 3);
        const Tensor fused = step.forward(batch, kv.layers()).to(Device::cpu());
        const Tensor cache_after_fused = kv.layers()[1].k.to(Device::cpu());
        int observed_values = 0;
        const Tensor separate =
            step.forward(batch, kv.layers(),
                         [&](const std::string&, const Tensor&) { ++observed_values; })
                .to(Device::cpu());
        const Tensor cache_after_separate = kv.layers()[1].k.to(Device::cpu());
        const std::string where = std::string(dtype_name(dtype)) + " family " +
                                  std::to_string(static_cast<int>(family)) + " step " +
                                  std::to_string(t);
        EXPECT_GT(observed_values, 0) << where;
        ASSERT_EQ(fused.nbytes(), separate.nbytes()) << where;
        EXPECT_EQ(0, std::memcmp(fused.raw_data(), separate.raw_data(), fused.nbytes())) << where;
        EXPECT_EQ(0, std::memcmp(cache_after_fused.raw_data(), cache_after_separate.raw_data(),
                                 cache_after_fused.nbytes()))
            << where;
      }
    }
}

// Programmatic dependent launch lets each decode kernel start while the one before it
// finishes (the GEMV loads weights before it waits); the tokens, log-probabilities and top
// lists must be those of plain launches, in graphs and eagerly.
TEST(EngineCuda, ProgrammaticLaunchGivesTheBitsOfPlainLaunch) {
  MICROLLM_REQUIRE_CUDA();
  struct Restore {
    bool was = cuda::programmatic_launch();
    ~Restore() { cuda::set_programmatic_launch(was); }
  } restore;
  for (model::Family family : kFamilies)
    for (DType dtype : {DType::F32, DType::BF16}) {
      const ModelConfig c = cuda_config(family);
      auto w = std::make_shared<const ModelWeights>(
          ModelWeights::random(c, Device::cuda(0), dtype, 8, 0.1));
      for (int64_t n : {1, 3, 6}) {  // GEMV steps (≤ 4 sequences) and GEMM steps
        std::vector<std::vector<int32_t>> prompts;
        std::vector<infer::SamplingParams> params;
        for (int64_t i = 0; i < n; ++i) {
          prompts.push_back(random_ids(3 + 17 * i, c.vocab_size, 300 + static_cast<uint64_t>(i)));
          infer::SamplingParams p;
          p.max_new_tokens = 12;
          p.ignore_eos = true;
          p.temperature = i % 2 == 0 ? 0.0f : 0.7f;
          p.seed = 11 + static_cast<uint64_t>(i);
          p.logprobs = i % 2 == 0 ? 2 : 0;
          params.push_back(p);
        }
        const std::string where = std::string(dtype_name(dtype)) + " family " +
                                  std::to_string(static_cast<int>(family)) + " batch " +
                                  std::to_string(n);
        for (bool graphs : {true, false}) {
          cuda::set_programmatic_launch(true);
          const Generated dependent = generate(w, prompts, params, graphs);
          cuda::set_programmatic_launch(false);
          const Generated plain = generate(w, prompts, params, graphs);
          EXPECT_EQ(dependent.ids, plain.ids) << where << " graphs " << graphs;
          EXPECT_EQ(dependent.logprobs, plain.logprobs) << where << " graphs " << graphs;
          EXPECT_EQ(dependent.top, plain.top) << where << " graphs " << graphs;
        }
      }
    }
}

TEST(EngineCuda, PenaltyRowsRunEagerlyWithTheSameTokens) {
  MICROLLM_REQUIRE_CUDA();
  const ModelConfig c = cuda_config(model::Family::Qwen2);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cuda(0), DType::BF16, 9, 0.1));
  const std::vector<std::vector<int32_t>> prompts = {random_ids(9, c.vocab_size, 1),
                                                     random_ids(30, c.vocab_size, 2)};
  infer::SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_new_tokens = 12;
  plain.logprobs = 0;  // the sampled tokens' logprobs are compared too
  plain.ignore_eos = true;
  infer::SamplingParams penalized = plain;
  penalized.repetition_penalty = 1.3f;
  const Generated graphs = generate(w, prompts, {plain, penalized}, true);
  const Generated eager = generate(w, prompts, {plain, penalized}, false);
  EXPECT_EQ(graphs.ids, eager.ids);
  EXPECT_EQ(graphs.logprobs, eager.logprobs);
  EXPECT_EQ(graphs.graph_steps, 0);  // every decode step had a penalized row
  // Alone, the plain prompt's decode steps replay graphs and give the same tokens.
  const Generated alone = generate(w, {prompts[0]}, plain, true);
  EXPECT_GT(alone.graph_steps, 0);
  EXPECT_EQ(alone.ids[0], eager.ids[0]);
}

TEST(EngineCuda, GraphDecodeStepIsOneUploadOneSyncNoAllocation) {
  MICROLLM_REQUIRE_CUDA();
  const ModelConfig c = cuda_config(model::Family::Llama);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cuda(0), DType::BF16, 2, 0.1));
  infer::EngineOptions options;
  options.kv_memory_bytes = 16 << 20;
  options.max_num_seqs = 8;
  infer::Engine engine(w, options);
  start_sampled_requests(engine, c, 3, 4);
  const int64_t graph_steps = engine.stats().graph_steps;
  StepCost cost;
  const std::vector<infer::TokenOutput> out = counted_step(engine, cost);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(engine.stats().graph_steps, graph_steps + 1);
  EXPECT_EQ(cost.h2d, 1);
  EXPECT_EQ(cost.d2h, 0);  // the download is a node of the graph
  EXPECT_EQ(cost.syncs, 1);
  EXPECT_EQ(cost.allocations, 0);
  EXPECT_EQ(cost.backend_mallocs, 0);
  // The graph holds the kernels one eager step of the bucket launches.
  infer::EngineOptions eager_options = options;
  eager_options.cuda_graphs = false;
  const infer::Engine eager(w, eager_options);
  const int64_t nodes = engine.kernels_per_decode_step(3);
  EXPECT_GE(nodes, 5 * c.num_layers);  // at least a fused decode layer's five kernels
  EXPECT_EQ(nodes, engine.kernels_per_decode_step(4));  // 3 sequences pad to bucket 4
  EXPECT_EQ(nodes, eager.kernels_per_decode_step(4));
}
