// Training: SHA-256, token files, the learning-rate schedule, AdamW/SGD updates against
// the textbook formulas, a tiny model learning a synthetic task, gradient accumulation,
// and bit-identical resume from a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "microllm/io/sha256.h"
#include "microllm/train/trainer.h"
#include "support/scoped_env.h"

using namespace microllm;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("microllm_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

model::ModelConfig tiny_config(int64_t vocab) {
  return model::ModelConfig::from_json({{"model_type", "qwen2"},
                                        {"vocab_size", vocab},
                                        {"hidden_size", 32},
                                        {"intermediate_size", 64},
                                        {"num_hidden_layers", 2},
                                        {"num_attention_heads", 4},
                                        {"num_key_value_heads", 2},
                                        {"rms_norm_eps", 1e-6},
                                        {"rope_theta", 10000.0},
                                        {"tie_word_embeddings", true}},
                                       "tiny");
}

// A stream where each token determines the next: a fixed random cycle through the vocabulary.
std::vector<uint32_t> cycle_stream(int64_t vocab, int64_t length, uint64_t seed) {
  std::vector<uint32_t> order(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[i] = static_cast<uint32_t>(i);
  Generator gen(seed);
  for (int64_t i = vocab - 1; i > 0; --i)
    std::swap(order[i], order[gen.next_u64() % static_cast<uint64_t>(i + 1)]);
  std::vector<uint32_t> tokens(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) tokens[i] = order[i % vocab];
  return tokens;
}

// A stream of `length` uniform random tokens below `vocab`.
std::vector<uint32_t> random_stream(int64_t vocab, int64_t length, uint64_t seed) {
  Generator gen(seed);
  std::vector<uint32_t> tokens(static_cast<size_t>(length));
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(gen.next_u64() % vocab);
  return tokens;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Sha256, Fips180Vectors) {
  // FIPS 180-2 appendix B examples.
  EXPECT_EQ(io::sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(io::sha256_hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(io::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  io::Sha256 million;  // one million 'a', fed in uneven pieces
  const std::string chunk(999, 'a');
  for (int i = 0; i < 1001; ++i) million.update(chunk.data(), chunk.size());
  million.update(chunk.data(), 1000000 - 999 * 1001);
  EXPECT_EQ(million.hex_digest(),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(TokenFile, RoundTripAndEveryCorruption) {
  const fs::path dir = temp_dir("tokens");
  const std::string path = (dir / "train.bin").string();
  const std::vector<uint32_t> tokens = {5, 0, 99, 42, 7};
  train::write_token_file(path, tokens, 100);
  const train::TokenFile f = train::load_token_file(path, 100);
  EXPECT_EQ(f.tokens.to_vector_i64(), (std::vector<int64_t>{5, 0, 99, 42, 7}));
  EXPECT_EQ(f.vocab_size, 100);
  EXPECT_EQ(f.sha256, io::sha256_hex(tokens.data(), tokens.size() * 4));
  // Ids beyond the model's vocabulary.
  EXPECT_NE(error_of([&] { train::load_token_file(path, 50); }).find("token 99 at position 2"),
            std::string::npos);
  // Writing ids beyond the declared vocabulary.
  EXPECT_NE(error_of([&] {
              train::write_token_file(path, {1, 200}, 100);
            }).find("token 200"),
            std::string::npos);
  // Tampered data: the hash no longer matches.
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(4);
    const uint32_t other = 1;
    io.write(reinterpret_cast<const char*>(&other), 4);
  }
  EXPECT_NE(error_of([&] { train::load_token_file(path, 100); }).find("SHA-256"),
            std::string::npos);
  // Truncated data: count and size disagree.
  fs::resize_file(path, 8);
  EXPECT_NE(error_of([&] { train::load_token_file(path, 100); }).find("manifest's count 5"),
            std::string::npos);
  // Missing manifest.
  fs::remove(path + ".json");
  EXPECT_NE(error_of([&] { train::load_token_file(path, 100); }).find("missing manifest"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Schedule, WarmupThenCosine) {
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(1, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(10, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_NEAR(train::warmup_cosine_lr(60, 10, 110, 1.0, 0.1), 0.55,
              1e-12);  // halfway: mean of peak and floor
  EXPECT_NEAR(train::warmup_cosine_lr(110, 10, 110, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(train::warmup_cosine_lr(5, 0, 5, 2.0, 0.0),
                   0.0 + 0.5 * 2.0 * (1.0 + std::cos(M_PI)));
}

TEST(Optimizer, AdamWAndSgdFollowTheTextbookUpdates) {
  // θ (2, 2) decays, b (2) does not; two steps with fixed gradients, compared with the
  // formulas of Loshchilov & Hutter (AdamW) and torch.optim.SGD written out here in F64.
  Tensor w = Tensor::from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.25}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<double>{1.0, -2.0}, {2});
  std::map<std::string, Tensor> params = {{"w", w}, {"b", b}};
  train::AdamWOptions o{0.9, 0.99, 1e-8, 0.1};
  train::AdamW adamw(params, o);
  const std::vector<std::vector<double>> gw = {{0.1, -0.2, 0.3, 0.0}, {-0.5, 0.1, 0.2, 0.4}};
  const std::vector<std::vector<double>> gb = {{1.0, 2.0}, {0.5, -1.0}};
  std::vector<double> tw = w.to_vector_f64(), tb = b.to_vector_f64();
  std::vector<double> mw(4, 0), vw(4, 0), mb(2, 0), vb(2, 0);
  const double lr = 0.01;
  for (int step = 1; step <= 2; ++step) {
    w.set_grad(Tensor::from_vector(gw[step - 1], {2, 2}));
    b.set_grad(Tensor::from_vector(gb[step - 1], {2}));
    adamw.step(lr);
    auto update = [&](std::vector<double>& t, std::vector<double>& m, std::vector<double>& v,
                      const std::vector<double>& g, bool decay) {
      for (size_t i = 0; i < t.size(); ++i) {
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
        const double mhat = m[i] / (1 - std::pow(0.9, step)),
                     vhat = v[i] / (1 - std::pow(0.99, step));
        if (decay) t[i] *= 1 - lr * 0.1;
        t[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
      }
    };
    update(tw, mw, vw, gw[step - 1], true);
    update(tb, mb, vb, gb[step - 1], false);
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w.to_vector_f64()[i], tw[i], 1e-6) << i;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(b.to_vector_f64()[i], tb[i], 1e-6) << i;

  Tensor s = Tensor::from_vector(std::vector<double>{1.0, 2.0, 3.0, 4.0}, {2, 2});
  train::Sgd sgd({{"s", s}}, {0.5, 0.01});
  std::vector<double> ts = s.to_vector_f64(), buf(4, 0);
  for (int step = 1; step <= 3; ++step) {
    const std::vector<double> g = {0.1 * step, -0.2, 0.3, -0.4 * step};
    s.set_grad(Tensor::from_vector(g, {2, 2}));
    sgd.step(0.1);
    for (size_t i = 0; i < 4; ++i) {
      const double gi = g[i] + 0.01 * ts[i];
      buf[i] = step == 1 ? gi : 0.5 * buf[i] + gi;
      ts[i] -= 0.1 * buf[i];
    }
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(s.to_vector_f64()[i], ts[i], 1e-6) << i;
}

TEST(Optimizer, ClippingScalesToTheGlobalNorm) {
  Tensor a = Tensor::zeros({2});
  Tensor c = Tensor::zeros({1});
  a.set_grad(Tensor::from_vector(std::vector<double>{3.0, 0.0}, {2}));
  c.set_grad(Tensor::from_vector(std::vector<double>{4.0}, {1}));
  const std::map<std::string, Tensor> params = {{"a", a}, {"c", c}};
  EXPECT_NEAR(train::clip_grad_norm(params, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector_f64()[0], 0.6, 1e-5);
  EXPECT_NEAR(c.grad().to_vector_f64()[0], 0.8, 1e-5);
  EXPECT_NEAR(train::clip_grad_norm(params, 10.0), 1.0, 1e-5);  // under the limit: unchanged
}

TEST(Trainer, TinyModelLearnsADeterministicCycle) {
  const fs::path dir = temp_dir("learn");
  const int64_t vocab = 16;
  train::write_token_file((dir / "data.bin").string(), cycle_stream(vocab, 4096, 3), vocab);
  const train::TokenFile data = train::load_token_file((dir / "data.bin").string(), vocab);
  train::TrainOptions o;
  o.steps = 60;
  o.batch = 4;
  o.seq = 16;
  o.lr = 1e-2;
  o.warmup = 5;
  o.seed = 1;
  train::Trainer trainer(tiny_config(vocab), o);
  const double before = trainer.evaluate(data, 2);
  double last = 0;
  while (trainer.step() < o.steps) last = trainer.train_step(data).loss;
  const double after = trainer.evaluate(data, 2);
  EXPECT_GT(before, 2.0);  // about ln 16 = 2.77 at the start
  EXPECT_LT(after, 0.05);  // each token determines the next
  EXPECT_LT(last, 0.1);
  fs::remove_all(dir);
}

TEST(Trainer, ChunkedLossTrainsLikeTheWholeLogits) {
  const fs::path dir = temp_dir("chunked");
  const int64_t vocab = 32;
  train::write_token_file((dir / "data.bin").string(), random_stream(vocab, 2000, 11), vocab);
  const train::TokenFile data = train::load_token_file((dir / "data.bin").string(), vocab);
  train::TrainOptions o;
  o.steps = 4;
  o.batch = 3;
  o.seq = 12;
  o.lr = 1e-2;
  o.seed = 5;
  train::Trainer whole(tiny_config(vocab), o);
  o.loss_chunk = 5;  // 36 rows in chunks of 5, the last one of 1
  train::Trainer chunked(tiny_config(vocab), o);
  for (int i = 0; i < 4; ++i) {
    const double a = whole.train_step(data).loss, b = chunked.train_step(data).loss;
    EXPECT_NEAR(a, b, 1e-5 * a) << "step " << i + 1;
  }
  EXPECT_NEAR(whole.evaluate(data, 2), chunked.evaluate(data, 2), 1e-5);
  for (const auto& [name, p] : whole.model().parameters()) {
    const std::vector<double> x = p.to_vector_f64(),
                              y = chunked.model().parameters().at(name).to_vector_f64();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5) << name << " " << i;
  }
  fs::remove_all(dir);
}

// The LM head and loss as lm_head_cross_entropy (the default) against the whole logits
// (MICROLLM_FUSED_LOSS=0). On the CPU, with one micro-batch (dloss = 1), the same logits,
// gradient formula and products: the same bits.
TEST(Trainer, FusedLossTrainsWithTheBitsOfTheWholeLogits) {
  const fs::path dir = temp_dir("fused_loss");
  const int64_t vocab = 32;
  train::write_token_file((dir / "data.bin").string(), random_stream(vocab, 2000, 12), vocab);
  const train::TokenFile data = train::load_token_file((dir / "data.bin").string(), vocab);
  train::TrainOptions o;
  o.steps = 3;
  o.batch = 3;
  o.seq = 12;
  o.lr = 1e-2;
  o.seed = 6;
  train::Trainer whole(tiny_config(vocab), o), fused(tiny_config(vocab), o);
  for (int i = 0; i < 3; ++i) {
    double a = 0.0;
    {
      const microllm::testing::ScopedEnv off("MICROLLM_FUSED_LOSS", "0");
      a = whole.train_step(data).loss;
    }
    const microllm::testing::ScopedEnv on("MICROLLM_FUSED_LOSS", "1");
    EXPECT_EQ(a, fused.train_step(data).loss) << "step " << i + 1;
  }
  for (const auto& [name, p] : whole.model().parameters())
    EXPECT_EQ(p.to_vector_f64(), fused.model().parameters().at(name).to_vector_f64()) << name;
  fs::remove_all(dir);
}

TEST(Trainer, GradientAccumulationEqualsOneLargerBatch) {
  const fs::path dir = temp_dir("accum");
  const int64_t vocab = 32;
  train::write_token_file((dir / "data.bin").string(), random_stream(vocab, 2000, 9), vocab);
  const train::TokenFile data = train::load_token_file((dir / "data.bin").string(), vocab);
  train::TrainOptions o;
  o.steps = 2;
  o.seq = 12;
  o.optimizer = "sgd";
  o.grad_clip = 0;
  o.lr = 0.5;
  o.seed = 4;
  o.batch = 6;
  o.grad_accum = 1;
  train::Trainer big(tiny_config(vocab), o);
  o.batch = 2;
  o.grad_accum = 3;
  train::Trainer accumulated(tiny_config(vocab), o);
  for (int i = 0; i < 2; ++i) {
    big.train_step(data);
    accumulated.train_step(data);
  }
  for (const auto& [name, p] : big.model().parameters()) {
    const std::vector<double> x = p.to_vector_f64(),
                              y = accumulated.model().parameters().at(name).to_vector_f64();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-5) << name << " " << i;
  }
  fs::remove_all(dir);
}

TEST(Trainer, ResumeContinuesBitForBit) {
  const fs::path dir = temp_dir("resume");
  const int64_t vocab = 24;
  train::write_token_file((dir / "data.bin").string(), cycle_stream(vocab, 3000, 5), vocab);
  const train::TokenFile data = train::load_token_file((dir / "data.bin").string(), vocab);
  train::TrainOptions o;
  o.steps = 8;
  o.batch = 3;
  o.seq = 10;
  o.warmup = 2;
  o.seed = 2;
  o.grad_accum = 2;
  train::Trainer straight(tiny_config(vocab), o);
  while (straight.step() < o.steps) straight.train_step(data);

  train::Trainer first(tiny_config(vocab), o);
  while (first.step() < o.steps / 2) first.train_step(data);
  first.save_checkpoint(dir.string());
  train::Trainer second(tiny_config(vocab), o);
  second.resume(dir.string());
  EXPECT_EQ(second.step(), o.steps / 2);
  while (second.step() < o.steps) second.train_step(data);

  for (const auto& [name, p] : straight.model().parameters()) {
    const Tensor q = second.model().parameters().at(name);
    ASSERT_EQ(std::memcmp(p.raw_data(), q.raw_data(), p.nbytes()), 0)
        << name << " differs after resume";
  }
  // A checkpoint from a run of another shape is refused.
  train::TrainOptions other = o;
  other.batch = 4;
  train::Trainer mismatched(tiny_config(vocab), other);
  EXPECT_NE(error_of([&] { mismatched.resume(dir.string()); }).find("batch"), std::string::npos);
  fs::remove_all(dir);
}
