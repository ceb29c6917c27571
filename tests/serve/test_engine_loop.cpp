// EngineLoop on a small random CPU model: requests submitted from many threads at once get
// the tokens the same requests get from an Engine stepped directly, each alone (greedy and
// seeded); aborted requests free their KV blocks; refused requests throw before any token;
// stopping ends every open stream with an error and refuses new requests.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "microllm/core/error.h"
#include "microllm/model/weights.h"
#include "microllm/serve/engine_loop.h"

using namespace microllm;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const model::ModelWeights> tiny_weights() {
  model::ModelConfig c;
  c.family = model::Family::Qwen2;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 40;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.qkv_bias = true;
  c.tie_word_embeddings = true;
  return std::make_shared<const model::ModelWeights>(
      model::ModelWeights::random(c, Device::cpu(), DType::F32, 77, 0.3));
}

infer::EngineOptions small_options() {
  infer::EngineOptions o;
  o.kv_memory_bytes = 4 << 20;
  o.max_num_seqs = 8;
  return o;
}

std::vector<int32_t> prompt(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 61);
  return ids;
}

infer::SamplingParams params_for(int i) {
  infer::SamplingParams p;
  p.max_new_tokens = 5 + i % 4;
  p.ignore_eos = true;
  p.temperature = i % 2 == 0 ? 0.0f : 0.8f;  // greedy and seeded sampling
  p.seed = 1000 + static_cast<uint64_t>(i);
  return p;
}

// The request's tokens from an Engine stepped directly with only this request.
std::vector<int32_t> alone(const std::shared_ptr<const model::ModelWeights>& w,
                           const std::vector<int32_t>& ids, const infer::SamplingParams& p) {
  infer::Engine engine(w, small_options());
  engine.add_request(ids, p);
  std::vector<int32_t> out;
  while (engine.has_unfinished())
    for (const infer::TokenOutput& t : engine.step()) out.push_back(t.token);
  return out;
}

// Reads a stream to its end; the events must all be tokens.
std::vector<int32_t> drain(serve::RequestStream& stream) {
  std::vector<int32_t> out;
  for (;;) {
    const std::optional<serve::StreamEvent> e = stream.next(10s);
    if (!e) {
      ADD_FAILURE() << "no event in 10 s";
      return out;
    }
    EXPECT_FALSE(e->is_error) << e->error;
    if (e->is_error) return out;
    out.push_back(e->token.token);
    if (e->token.finished) return out;
  }
}

}  // namespace

TEST(EngineLoop, ConcurrentRequestsGetTheirAloneTokens) {
  const auto w = tiny_weights();
  infer::Engine engine(w, small_options());
  serve::EngineLoop loop(engine);
  constexpr int kRequests = 12;
  std::vector<std::vector<int32_t>> got(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i)
    clients.emplace_back([&, i] {
      const auto stream = loop.submit(prompt(3 + i, static_cast<uint64_t>(i)), params_for(i));
      got[static_cast<size_t>(i)] = drain(*stream);
    });
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i)
    EXPECT_EQ(got[static_cast<size_t>(i)],
              alone(w, prompt(3 + i, static_cast<uint64_t>(i)), params_for(i)))
        << "request " << i;
  // The loop publishes after its step; give it the turn that follows the last token.
  for (int tries = 0; tries < 100 && loop.snapshot().requests != 0; ++tries)
    std::this_thread::sleep_for(10ms);
  const serve::LoopSnapshot s = loop.snapshot();
  EXPECT_EQ(s.requests, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.generated_tokens, 0);
}

TEST(EngineLoop, AbortFreesTheBlocksAndRefusalsThrow) {
  const auto w = tiny_weights();
  infer::Engine engine(w, small_options());
  serve::EngineLoop loop(engine);
  infer::SamplingParams long_run = params_for(0);
  long_run.max_new_tokens = 100;
  const auto stream = loop.submit(prompt(10, 1), long_run);
  ASSERT_TRUE(stream->next(10s).has_value());  // it runs
  loop.abort(stream->id());
  bool freed = false;
  for (int tries = 0; tries < 200 && !freed; ++tries) {
    const serve::LoopSnapshot s = loop.snapshot();
    freed = s.requests == 0 && s.kv_blocks_used == 0;
    if (!freed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(freed);
  // An id outside the vocabulary: the engine's error, before any token.
  EXPECT_THROW(loop.submit({1, 2, 999}, params_for(0)), Error);
  // Too long for the context (128 positions).
  EXPECT_THROW(loop.submit(prompt(200, 2), params_for(0)), Error);
  EXPECT_TRUE(loop.running());
  // The loop still serves afterwards.
  EXPECT_EQ(drain(*loop.submit(prompt(4, 3), params_for(2))),
            alone(w, prompt(4, 3), params_for(2)));
}

TEST(EngineLoop, StopEndsOpenStreamsAndRefusesNewRequests) {
  const auto w = tiny_weights();
  infer::Engine engine(w, small_options());
  serve::EngineLoop loop(engine);
  infer::SamplingParams long_run = params_for(0);
  long_run.max_new_tokens = 120;
  const auto stream = loop.submit(prompt(4, 5), long_run);
  ASSERT_TRUE(stream->next(10s).has_value());
  loop.stop();
  EXPECT_FALSE(loop.running());
  bool ended_with_error = false;
  for (int i = 0; i < 200; ++i) {
    const std::optional<serve::StreamEvent> e = stream->next(10s);
    ASSERT_TRUE(e.has_value());
    if (e->is_error) {
      ended_with_error = true;
      EXPECT_NE(e->error.find("stopped"), std::string::npos) << e->error;
      break;
    }
    ASSERT_FALSE(e->token.finished) << "120 tokens cannot finish in the step after stop()";
  }
  EXPECT_TRUE(ended_with_error);
  EXPECT_THROW(loop.submit(prompt(4, 6), params_for(0)), Error);
}
