// The inference path against the reference Transformer on the same weights (CPU, F32):
// DecoderStep's prefill (whole and chunked) and decode logits equal the full uncached
// forward; a paged cache with shuffled blocks gives the logits of a contiguous one, bit for
// bit; the Engine's greedy tokens are the reference's, a batch generates what each prompt
// generates alone (greedy and seeded sampling), block sizes 1, 16 and 5 agree, preemption
// under a tiny KV pool changes no token, and no block is left in use afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "core/expect_error.h"
#include "infer/step_batch_builder.h"
#include "microllm/autograd/node.h"
#include "microllm/infer/engine.h"
#include "microllm/infer/kv_cache.h"
#include "microllm/model/decoder_step.h"
#include "microllm/model/transformer.h"
#include "microllm/ops/ops.h"

using namespace microllm;
using microllm::testing::make_paging;
using microllm::testing::make_step;
using microllm::testing::Paging;
using microllm::testing::throws_error;
using model::ModelConfig;
using model::ModelWeights;

namespace {

ModelConfig tiny_config(model::Family family) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = family == model::Family::Llama ? 4 : 2;
  c.head_dim = family == model::Family::Qwen3 ? 12 : 8;
  c.max_position_embeddings = 128;
  c.rope_theta = 10000.0;
  c.qkv_bias = family == model::Family::Qwen2;
  c.qk_norm = family == model::Family::Qwen3;
  c.tie_word_embeddings = family != model::Family::Llama;
  return c;
}

const model::Family kFamilies[] = {model::Family::Qwen2, model::Family::Llama,
                                   model::Family::Qwen3};

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

// Reference logits (V) of the last token of `ids`, by a full forward with no cache.
std::vector<float> reference_last_logits(const model::Transformer& t,
                                         const std::vector<int32_t>& ids) {
  const std::vector<int64_t> wide(ids.begin(), ids.end());
  const Tensor x = Tensor::from_vector(wide, {1, static_cast<int64_t>(ids.size())});
  const Tensor logits = t.forward(x);  // (1, T, V)
  return logits.narrow(1, static_cast<int64_t>(ids.size()) - 1, 1).to_vector_f32();
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_ref = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_ref = std::max(max_ref, std::abs(static_cast<double>(want[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(max_diff, tol * std::max(1.0, max_ref)) << what;
}

std::vector<std::vector<int32_t>> generate(const std::shared_ptr<const ModelWeights>& w,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           infer::SamplingParams params,
                                           infer::EngineOptions options = {}) {
  if (options.kv_memory_bytes == 0) options.kv_memory_bytes = 8 << 20;
  infer::Engine engine(w, options);
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) index[engine.add_request(prompts[i], params)] = i;
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step())
      out[index.at(t.request_id)].push_back(t.token);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());  // nothing leaked
  return out;
}

}  // namespace

TEST(DecoderStep, PrefillChunksAndDecodeEqualTheUncachedForward) {
  autograd::NoGradGuard no_grad;
  for (model::Family family : kFamilies) {
    const ModelConfig c = tiny_config(family);
    const ModelWeights w = ModelWeights::random(c, Device::cpu(), DType::F32, 21, 0.3);
    const model::Transformer reference = model::Transformer::from_weights(w);
    const int64_t BS = 4, M = 8;
    const std::vector<std::vector<int32_t>> prompts = {random_ids(9, c.vocab_size, 1),
                                                       random_ids(3, c.vocab_size, 2),
                                                       random_ids(14, c.vocab_size, 3)};
    const Paging paging = make_paging({16, 16, 20}, BS, 24, /*shuffle=*/true);
    infer::KvCache kv(c, Device::cpu(), DType::F32, BS, 24);
    model::DecoderStep step(w, {64, 4, M, BS});
    // Prefill: sequence 0 whole, sequences 1 and 2 in two chunks (the second chunk reads the
    // first from the cache).
    std::vector<int64_t> split = {9, 2, 6};
    std::vector<std::vector<int32_t>> first, second;
    for (size_t b = 0; b < prompts.size(); ++b) {
      first.push_back({prompts[b].begin(), prompts[b].begin() + split[b]});
      second.push_back({prompts[b].begin() + split[b], prompts[b].end()});
    }
    step.forward(make_step({first[1], first[2]}, {0, 0},
                           {paging.block_size, {paging.tables[1], paging.tables[2]}}, M),
                 kv.layers());
    const Tensor logits = step.forward(
        make_step({first[0], second[1], second[2]}, {0, split[1], split[2]}, paging, M),
        kv.layers());  // (3, V)
    for (size_t b = 0; b < prompts.size(); ++b)
      expect_close(logits.narrow(0, static_cast<int64_t>(b), 1).to_vector_f32(),
                   reference_last_logits(reference, prompts[b]), 1e-4,
                   "prefill of sequence " + std::to_string(b));
    // Three decode steps, all sequences at different positions.
    std::vector<std::vector<int32_t>> seqs = prompts;
    for (int step_i = 0; step_i < 3; ++step_i) {
      std::vector<std::vector<int32_t>> news;
      std::vector<int64_t> starts;
      for (size_t b = 0; b < seqs.size(); ++b) {
        const int32_t next = static_cast<int32_t>((7 * step_i + 3 * b + 1) % c.vocab_size);
        starts.push_back(static_cast<int64_t>(seqs[b].size()));
        seqs[b].push_back(next);
        news.push_back({next});
      }
      const Tensor decoded = step.forward(make_step(news, starts, paging, M), kv.layers());
      for (size_t b = 0; b < seqs.size(); ++b)
        expect_close(decoded.narrow(0, static_cast<int64_t>(b), 1).to_vector_f32(),
                     reference_last_logits(reference, seqs[b]), 1e-4,
                     "decode " + std::to_string(step_i) + " of sequence " + std::to_string(b));
    }
  }
}

TEST(DecoderStep, PagedEqualsContiguousBitForBit) {
  autograd::NoGradGuard no_grad;
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  const ModelWeights w = ModelWeights::random(c, Device::cpu(), DType::F32, 5, 0.3);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(11, c.vocab_size, 4),
                                                     random_ids(6, c.vocab_size, 5)};
  std::vector<std::vector<float>> results;
  for (bool shuffle : {false, true}) {
    const Paging paging = make_paging({12, 8}, 4, 16, shuffle);
    infer::KvCache kv(c, Device::cpu(), DType::F32, 4, 16);
    model::DecoderStep step(w, {32, 2, 4, 4});
    step.forward(make_step(prompts, {0, 0}, paging, 4), kv.layers());
    results.push_back(
        step.forward(make_step({{1}, {2}}, {11, 6}, paging, 4), kv.layers()).to_vector_f32());
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(Engine, GreedyEqualsTheUncachedReferenceForEveryFamily) {
  autograd::NoGradGuard no_grad;
  for (model::Family family : kFamilies) {
    const ModelConfig c = tiny_config(family);
    auto w = std::make_shared<const ModelWeights>(
        ModelWeights::random(c, Device::cpu(), DType::F32, 31, 0.3));
    const model::Transformer reference = model::Transformer::from_weights(*w);
    const std::vector<std::vector<int32_t>> prompts = {random_ids(1, c.vocab_size, 6),
                                                       random_ids(7, c.vocab_size, 7),
                                                       random_ids(23, c.vocab_size, 8)};
    infer::SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.max_new_tokens = 10;
    infer::EngineOptions options;
    options.prefill_chunk = 8;  // the 23-token prompt takes three chunks
    options.block_size = 5;
    const auto out = generate(w, prompts, greedy, options);
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> seq = prompts[i];
      for (int32_t token : out[i]) {
        const std::vector<float> logits = reference_last_logits(reference, seq);
        const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
        ASSERT_EQ(token, best) << "family " << static_cast<int>(family) << " prompt " << i;
        seq.push_back(token);
      }
      EXPECT_EQ(out[i].size(), 10u);
    }
  }
}

TEST(Engine, BatchEqualsAloneAndBlockSizesAgree) {
  const ModelConfig c = tiny_config(model::Family::Qwen3);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cpu(), DType::F32, 41, 0.3));
  const std::vector<std::vector<int32_t>> prompts = {
      random_ids(4, c.vocab_size, 9), random_ids(13, c.vocab_size, 10),
      random_ids(2, c.vocab_size, 11), random_ids(30, c.vocab_size, 12)};
  infer::SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_new_tokens = 12;
  infer::SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.top_k = 20;
  sampled.top_p = 0.9f;
  sampled.seed = 1234;
  sampled.max_new_tokens = 12;
  for (const infer::SamplingParams& params : {greedy, sampled}) {
    const auto together = generate(w, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(generate(w, {prompts[i]}, params)[0], together[i]) << "prompt " << i;
    for (int64_t bs : {1, 16, 5}) {
      infer::EngineOptions options;
      options.block_size = bs;
      options.prefill_chunk = 7;
      EXPECT_EQ(generate(w, prompts, params, options), together) << "block size " << bs;
    }
  }
}

TEST(Engine, PreemptionUnderATinyPoolChangesNoToken) {
  const ModelConfig c = tiny_config(model::Family::Llama);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cpu(), DType::F32, 51, 0.3));
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t i = 0; i < 6; ++i) prompts.push_back(random_ids(10 + 3 * i, c.vocab_size, 20 + i));
  infer::SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_new_tokens = 20;
  const auto roomy = generate(w, prompts, greedy);
  infer::EngineOptions tight;
  tight.block_size = 4;
  // 14 blocks of 4 tokens: one sequence of 45 tokens needs 12, six of them far more.
  tight.kv_memory_bytes = 14 * infer::KvCache::bytes_per_block(c, DType::F32, 4);
  tight.max_model_len = 56;
  infer::Engine engine(w, tight);
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) index[engine.add_request(prompts[i], greedy)] = i;
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step())
      out[index.at(t.request_id)].push_back(t.token);
  EXPECT_GT(engine.stats().preemptions, 0);
  EXPECT_EQ(out, roomy);
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());
}

// Waves of requests on one engine, each wave run to its end before the next is added (so
// later waves find the earlier ones' prompts in the prefix cache); outputs per request.
std::vector<std::vector<int32_t>> generate_waves(
    const std::shared_ptr<const ModelWeights>& w,
    const std::vector<std::vector<std::vector<int32_t>>>& waves,
    const infer::SamplingParams& params, infer::EngineOptions options, infer::EngineStats* stats) {
  infer::Engine engine(w, options);
  std::vector<std::vector<int32_t>> out;
  for (const auto& wave : waves) {
    std::map<int64_t, size_t> index;
    for (const auto& prompt : wave) {
      index[engine.add_request(prompt, params)] = out.size();
      out.emplace_back();
    }
    while (engine.has_unfinished())
      for (const infer::TokenOutput& t : engine.step())
        out[index.at(t.request_id)].push_back(t.token);
  }
  EXPECT_EQ(engine.num_free_kv_blocks(), engine.num_kv_blocks());  // cached blocks count free
  if (stats != nullptr) *stats = engine.stats();
  return out;
}

// A prompt that starts with a cached prefix generates, bit for bit, what it generates with
// no cache (greedy and seeded sampling, block sizes 5 and 16, chunked prefill, and a pool
// so small that cached blocks are evicted and sequences preempted).
TEST(Engine, PrefixCacheHitsGiveTheTokensOfAWholePrefill) {
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cpu(), DType::F32, 61, 0.3));
  const std::vector<int32_t> system = random_ids(40, c.vocab_size, 70);  // prefixes of 30…38
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t i = 0; i < 5; ++i) {
    std::vector<int32_t> p(system.begin(), system.begin() + 30 + static_cast<int64_t>(i) * 2);
    const std::vector<int32_t> tail =
        random_ids(1 + 4 * static_cast<int64_t>(i), c.vocab_size, 80 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  // The first prompt alone, then all five, then all five again (the same prompts whole).
  const std::vector<std::vector<std::vector<int32_t>>> waves = {{prompts[0]}, prompts, prompts};
  infer::SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.max_new_tokens = 9;
  infer::SamplingParams sampled = greedy;
  sampled.temperature = 0.9f;
  sampled.top_p = 0.95f;
  sampled.seed = 77;
  for (const infer::SamplingParams& params : {greedy, sampled})
    for (const int64_t bs : {5, 16})
      for (const bool tight : {false, true}) {
        infer::EngineOptions options;
        options.block_size = bs;
        options.prefill_chunk = 12;
        options.kv_memory_bytes =
            (tight ? 16 : 200) * infer::KvCache::bytes_per_block(c, DType::F32, bs) * 5 / bs;
        options.max_model_len = 64;
        options.prefix_caching = false;
        infer::EngineStats plain_stats, cached_stats;
        const auto plain = generate_waves(w, waves, params, options, &plain_stats);
        options.prefix_caching = true;
        const auto cached = generate_waves(w, waves, params, options, &cached_stats);
        const std::string what = "block size " + std::to_string(bs) + (tight ? " tight" : "") +
                                 " temperature " + std::to_string(params.temperature);
        EXPECT_EQ(cached, plain) << what;
        EXPECT_EQ(plain_stats.prefix_cache_hits, 0) << what;
        EXPECT_GT(cached_stats.prefix_cache_hits, 0) << what;
        EXPECT_LT(cached_stats.prompt_tokens, plain_stats.prompt_tokens) << what;
        if (tight) EXPECT_GT(cached_stats.preemptions + plain_stats.preemptions, 0) << what;
        for (size_t i = 0; i < prompts.size(); ++i)  // wave 3 = wave 2 = alone
          EXPECT_EQ(cached[1 + prompts.size() + i], cached[1 + i]) << what << " prompt " << i;
      }
}

// n > 1 choices of one prompt: the later choices wait for the first's prompt, then take
// its full blocks from the cache (computing at most a block and a token each), and each
// generates what it generates alone.
TEST(Engine, LaterChoicesShareTheFirstChoicesPromptBlocks) {
  const ModelConfig c = tiny_config(model::Family::Llama);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cpu(), DType::F32, 71, 0.3));
  const std::vector<int32_t> prompt = random_ids(43, c.vocab_size, 90);
  infer::SamplingParams params;
  params.temperature = 0.8f;
  params.max_new_tokens = 6;
  infer::EngineOptions options;
  options.block_size = 8;
  options.kv_memory_bytes = 8 << 20;
  infer::Engine engine(w, options);
  std::vector<int64_t> ids;
  for (uint64_t i = 0; i < 3; ++i) {
    params.seed = 500 + i;
    ids.push_back(engine.add_request(prompt, params, ids.empty() ? -1 : ids.front()));
  }
  std::map<int64_t, std::vector<int32_t>> out;
  std::map<int64_t, int64_t> cached;
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step()) {
      out[t.request_id].push_back(t.token);
      cached[t.request_id] = t.cached_prompt_tokens;
    }
  EXPECT_EQ(cached[ids[0]], 0);
  EXPECT_EQ(cached[ids[1]], 40);  // 5 full blocks of 8 of the 43 prompt ids
  EXPECT_EQ(cached[ids[2]], 40);
  EXPECT_EQ(engine.stats().prompt_tokens, 43 + 3 + 3);
  // The launch time is a part of the host time, and some of it was spent.
  EXPECT_GT(engine.stats().launch_seconds, 0.0);
  EXPECT_LE(engine.stats().launch_seconds, engine.stats().host_seconds);
  for (uint64_t i = 0; i < 3; ++i) {
    params.seed = 500 + i;
    infer::EngineOptions plain = options;
    plain.prefix_caching = false;
    EXPECT_EQ(generate(w, {prompt}, params, plain)[0], out[ids[i]]) << "choice " << i;
  }
}

// Logprobs are computed only for steps in which a sequence asks for them: without, a token's
// logprob is NaN and the tokens are those of a run with logprobs; with them, the sampled
// token's logprob is log_softmax of the uncached reference's logits, and a request that did
// not ask, batched with one that did, keeps its tokens.
TEST(Engine, LogprobsAreComputedOnlyWhenAskedAndChangeNoToken) {
  autograd::NoGradGuard no_grad;
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  auto w = std::make_shared<const ModelWeights>(
      ModelWeights::random(c, Device::cpu(), DType::F32, 81, 0.3));
  const model::Transformer reference = model::Transformer::from_weights(*w);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(5, c.vocab_size, 91),
                                                     random_ids(12, c.vocab_size, 92)};
  struct Run {
    std::map<int64_t, std::vector<int32_t>> ids;
    std::map<int64_t, std::vector<float>> logprobs;
  };
  auto run = [&](const std::vector<int32_t>& wants) {  // params.logprobs per prompt
    infer::EngineOptions options;
    options.kv_memory_bytes = 8 << 20;
    infer::Engine engine(w, options);
    for (size_t i = 0; i < prompts.size(); ++i) {
      infer::SamplingParams p;
      p.temperature = 0.7f;
      p.seed = 40 + i;
      p.max_new_tokens = 6;
      p.ignore_eos = true;
      p.logprobs = wants[i];
      engine.add_request(prompts[i], p);
    }
    Run r;
    while (engine.has_unfinished())
      for (const infer::TokenOutput& t : engine.step()) {
        r.ids[t.request_id].push_back(t.token);
        r.logprobs[t.request_id].push_back(t.logprob);
      }
    return r;
  };
  const Run none = run({-1, -1}), sampled = run({0, 0}), mixed = run({-1, 2});
  EXPECT_EQ(none.ids, sampled.ids);
  EXPECT_EQ(mixed.ids, sampled.ids);
  for (const auto& [id, lps] : none.logprobs)
    for (float lp : lps) EXPECT_TRUE(std::isnan(lp)) << "request " << id;
  for (const auto& [id, lps] : sampled.logprobs) {
    std::vector<int32_t> seq = prompts[static_cast<size_t>(id)];
    const std::vector<int32_t>& tokens = sampled.ids.at(id);
    ASSERT_EQ(lps.size(), tokens.size());
    for (size_t j = 0; j < tokens.size(); ++j) {
      const std::vector<float> logits = reference_last_logits(reference, seq);
      double sum = 0.0;
      const double top = *std::max_element(logits.begin(), logits.end());
      for (float v : logits) sum += std::exp(v - top);
      const double want = logits[static_cast<size_t>(tokens[j])] - top - std::log(sum);
      EXPECT_NEAR(lps[j], want, 1e-5) << "request " << id << " token " << j;
      seq.push_back(tokens[j]);
    }
  }
  EXPECT_EQ(mixed.logprobs.at(1), sampled.logprobs.at(1));  // asked: the same values
}

TEST(Engine, BadRequestsAreOneClearError) {
  const ModelConfig c = tiny_config(model::Family::Qwen2);
  auto w = std::make_shared<const ModelWeights>(ModelWeights::random(c, Device::cpu(), DType::F32));
  infer::EngineOptions options;
  options.kv_memory_bytes = 4 << 20;
  infer::Engine engine(w, options);
  infer::SamplingParams params;
  EXPECT_TRUE(throws_error(
      [&] {
        engine.add_request({1, 61}, params);
      },
      "Engine", {"61", "vocabulary"}));
  EXPECT_TRUE(throws_error([&] { engine.add_request(random_ids(128, 61, 1), params); }, "Engine",
                           {"128 tokens", "context"}));
  EXPECT_TRUE(throws_error([&] { engine.add_request({}, params); }, "Engine", {"empty"}));
  params.top_p = 0.0f;
  EXPECT_TRUE(throws_error([&] { engine.add_request({1}, params); }, "", {"top_p"}));
  EXPECT_FALSE(engine.has_unfinished());
  infer::EngineOptions small;
  small.kv_memory_bytes = 1024;
  EXPECT_TRUE(
      throws_error([&] { infer::Engine(w, small); }, "Engine", {"KV cache does not fit", "bytes"}));
}
