// `microllm demo`: an end-to-end check of the tensor core and autograd.
//
// Task: each sequence is `half` random tokens followed by the same tokens again; the model
// predicts every next token. The second half is predictable only by attending `half`
// positions back, which one attention layer with RoPE can learn. The loss on the second
// half falls from ln(vocab) towards 0; the first half stays near ln(vocab) (unpredictable).
//
// Model (B batch, T = 2·half, C width, H heads, Hkv = H/2, D = C/H, V vocab):
//   x = embed(ids)                                  (B, T, C)
//   h = rms_norm(x); q,k,v = linear(h); rope(q,k)   (B, H|Hkv, T, D)
//   x = x + o_proj(attention(q, k, v))              (B, T, C)
//   x = x + down(swiglu(gate(n), up(n))), n = rms_norm(x)
//   logits = lm_head(rms_norm(x))                   (B·T, V)
// trained with Adam written out below (the real optimizers live in train/).
#include "demo.h"

#include "commands.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "microllm/autograd/node.h"
#include "microllm/core/random.h"
#include "microllm/ops/ops.h"

namespace microllm::app {
namespace {

struct Parameter {
  const char* name;
  Tensor value;
  Tensor m, v;  // Adam moments
};

Tensor init(Generator& gen, const Shape& shape, double std) {
  Tensor t = randn(shape, gen, DType::F32, Device::cpu(), 0.0, std);
  t.set_requires_grad(true);
  return t;
}

}  // namespace

int run_demo(const DemoOptions& o) {
  const int64_t B = o.batch, T = 2 * o.half, C = o.width, H = o.heads, Hkv = o.heads / 2;
  const int64_t D = C / H, V = o.vocab, F = 2 * C;
  if (H < 2 || H % 2 != 0 || C % H != 0 || D % 2 != 0) {
    std::fprintf(stderr,
                 "microllm demo: --heads must be even and divide --width into even head sizes\n");
    return 2;
  }
  Generator gen(o.seed);
  const double s = 1.0 / std::sqrt(static_cast<double>(C));
  std::vector<Parameter> params = {
      {"embed", init(gen, {V, C}, 1.0), {}, {}},
      {"attn_norm", Tensor::ones({C}).set_requires_grad(true), {}, {}},
      {"q_proj", init(gen, {H * D, C}, s), {}, {}},
      {"k_proj", init(gen, {Hkv * D, C}, s), {}, {}},
      {"v_proj", init(gen, {Hkv * D, C}, s), {}, {}},
      {"o_proj", init(gen, {C, H * D}, s), {}, {}},
      {"mlp_norm", Tensor::ones({C}).set_requires_grad(true), {}, {}},
      {"gate_proj", init(gen, {F, C}, s), {}, {}},
      {"up_proj", init(gen, {F, C}, s), {}, {}},
      {"down_proj", init(gen, {C, F}, 1.0 / std::sqrt(static_cast<double>(F))), {}, {}},
      {"final_norm", Tensor::ones({C}).set_requires_grad(true), {}, {}},
      {"lm_head", init(gen, {V, C}, s), {}, {}},
  };
  auto p = [&](int i) { return params[i].value; };
  const Tensor inv_freq = ops::rope_inv_freq(D, 10000.0);
  const Tensor positions = Tensor::arange(T);

  std::printf(
      "microllm demo: copy task, vocab %lld, sequences of %lld, batch %lld, width %lld, "
      "%lld heads / %lld KV heads\n",
      static_cast<long long>(V), static_cast<long long>(T), static_cast<long long>(B),
      static_cast<long long>(C), static_cast<long long>(H), static_cast<long long>(Hkv));
  std::printf("%6s %12s %18s\n", "step", "loss", "second-half loss");
  double first_loss = 0.0, last_second_half = 0.0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    // Batch: random first half, copied into the second half; targets are the next tokens.
    std::vector<int64_t> ids(static_cast<size_t>(B * T)), targets(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < o.half; ++t)
        ids[b * T + t] = ids[b * T + t + o.half] = static_cast<int64_t>(gen.next_u64() % V);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) targets[b * T + t] = t + 1 < T ? ids[b * T + t + 1] : -100;
    const Tensor id_tensor = Tensor::from_vector(ids, {B, T});
    const Tensor target_tensor = Tensor::from_vector(targets, {B * T});

    // Forward.
    Tensor x = ops::embedding(p(0), id_tensor);                               // (B, T, C)
    Tensor h = ops::rms_norm(x, p(1), 1e-6);                                  // (B, T, C)
    Tensor q = ops::linear(h, p(2)).reshape({B, T, H, D}).transpose(1, 2);    // (B, H, T, D)
    Tensor k = ops::linear(h, p(3)).reshape({B, T, Hkv, D}).transpose(1, 2);  // (B, Hkv, T, D)
    Tensor v = ops::linear(h, p(4)).reshape({B, T, Hkv, D}).transpose(1, 2);  // (B, Hkv, T, D)
    q = ops::rope(q, positions, inv_freq);
    k = ops::rope(k, positions, inv_freq);
    Tensor a = ops::attention(q, k, v).transpose(1, 2).reshape({B, T, H * D});  // (B, T, C)
    auto r = ops::add_rms_norm(x, ops::linear(a, p(5)), p(6), 1e-6);            // (B, T, C) ×2
    Tensor m =
        ops::linear(ops::swiglu(ops::linear(r.normed, p(7)), ops::linear(r.normed, p(8))), p(9));
    x = ops::add(r.sum, m);  // (B, T, C)
    Tensor logits = ops::linear(ops::rms_norm(x, p(10), 1e-6), p(11)).reshape({B * T, V});
    Tensor loss = ops::cross_entropy(logits, target_tensor);

    // Backward and Adam (β1 0.9, β2 0.999, ε 1e-8).
    for (Parameter& param : params) param.value.zero_grad();
    loss.backward();
    {
      autograd::NoGradGuard no_grad;
      const double c1 = 1.0 - std::pow(0.9, static_cast<double>(step));
      const double c2 = 1.0 - std::pow(0.999, static_cast<double>(step));
      for (Parameter& param : params) {
        const Tensor g = param.value.grad();
        param.m = param.m.defined() ? ops::add(ops::scale(param.m, 0.9), ops::scale(g, 0.1))
                                    : ops::scale(g, 0.1);
        param.v = param.v.defined()
                      ? ops::add(ops::scale(param.v, 0.999), ops::scale(ops::mul(g, g), 0.001))
                      : ops::scale(ops::mul(g, g), 0.001);
        const Tensor update =
            ops::div(ops::scale(param.m, o.lr / c1),
                     ops::add_scalar(ops::sqrt(ops::scale(param.v, 1.0 / c2)), 1e-8));
        param.value.copy_from(ops::sub(param.value, update));
      }
    }

    if (step == 1) first_loss = loss.item();
    if (step == 1 || step % o.log_every == 0 || step == o.steps) {
      autograd::NoGradGuard no_grad;
      // Loss over the positions whose target lies in the second half (predictable ones).
      std::vector<int64_t> second = targets;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < o.half; ++t) second[b * T + t] = -100;
      last_second_half = ops::cross_entropy(logits, Tensor::from_vector(second, {B * T})).item();
      std::printf("%6lld %12.4f %18.4f\n", static_cast<long long>(step), loss.item(),
                  last_second_half);
    }
  }
  std::printf(
      "loss fell from %.4f; second-half loss is now %.4f (ln %lld = %.4f would be guessing)\n",
      first_loss, last_second_half, static_cast<long long>(V), std::log(static_cast<double>(V)));
  return 0;
}

Command add_demo_command(CLI::App& parent) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "demo",
      "Fit a one-block attention model to a copy task on the CPU and print the loss falling");
  cmd->add_option("--steps", options->steps, "optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch", options->batch, "sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--vocab", options->vocab, "vocabulary size")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  cmd->add_option("--half", options->half, "tokens before the copy")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--width", options->width, "model width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--heads", options->heads, "query heads (even)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--lr", options->lr, "Adam learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "random seed")->capture_default_str();
  cmd->add_option("--log-every", options->log_every, "steps between log lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return {cmd, [options] { return run_demo(*options); }};
}

}  // namespace microllm::app
