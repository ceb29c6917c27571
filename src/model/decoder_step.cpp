// DecoderStep (see decoder_step.h): the step's operators are the allocation-free `_out`
// forms writing into one arena carved at construction for the largest step of the limits.
#include "microllm/model/decoder_step.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "microllm/core/arena.h"
#include "microllm/ops/ops.h"

namespace microllm::model {
namespace {

// The largest step (in sequences) whose decode rows and LM head run through ops::gemv_out
// on CUDA (docs/optimization-log.md, H200, Qwen2.5-0.5B shape): F32 steps of up to 4
// sequences (at batch 8 the CUDA-core GEMV decoded slower than cuBLASLt: 3,842 against
// 4,693 tokens/s; at batch 1 faster: 916 against 586); BF16/F16 steps of up to 8, whose
// calls take the tensor-core GEMV from 5 sequences on, and the fused layer (batch 8 context
// 512: 5,926 tokens/s, against 5,466 through cuBLASLt; a variant that took batch 16 lost:
// 9,975 against 11,866). The GEMV's kernel is chosen by the step's sequence count
// (GemvFusion::kernel_rows), so a sequence's bits are independent of the batch within steps
// of 1–4 and within steps of 5–8 sequences, prefill rows or not.
int64_t decode_gemv_max_seqs(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16 ? ops::kGemvMaxRows : 4;
}

// The fused decode layer, unless MICROLLM_DECODE_FUSION is "0" (for measurements).
bool fused_decode_enabled() {
  const char* env = std::getenv("MICROLLM_DECODE_FUSION");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace

// Every activation of a step at its largest size (rows narrowed to N or B per step).
struct DecoderStep::Workspace {
  Arena arena;
  Tensor x;                  // (Nmax, C) residual stream
  Tensor h;                  // (Nmax, C) normed input of the next projection
  Tensor qkv;                // (Nmax, H·D + 2·Hkv·D) fused projection output
  Tensor q_raw;              // (Nmax, H, D) q before QK-norm (qwen3)
  Tensor k_raw;              // (Nmax, Hkv, D)
  Tensor q;                  // (Nmax, H, D) after QK-norm and RoPE
  Tensor k;                  // (Nmax, Hkv, D)
  Tensor attn;               // (Nmax, H, D) attention output
  Tensor attn_out;           // (Nmax, C) o_proj output
  Tensor gate;               // (Nmax, F)
  Tensor up;                 // (Nmax, F)
  Tensor act;                // (Nmax, F) swiglu(gate, up)
  Tensor mlp_out;            // (Nmax, C) down_proj output
  Tensor last;               // (Bmax, C) each sequence's last row of h
  Tensor logits;             // (Bmax, V)
  Tensor attention_scratch;  // F32 split-K partials of paged_attention (undefined when 0)

  // Takes every buffer from `a` (a planner or the real arena) in one fixed order.
  void take_all(Arena& a, const ModelConfig& c, const StepLimits& l, DType dtype,
                int64_t attention_bytes) {
    const int64_t N = l.max_tokens, B = l.max_seqs, C = c.hidden_size, F = c.intermediate_size;
    const int64_t H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
    x = a.take({N, C}, dtype, "x");
    h = a.take({N, C}, dtype, "h");
    qkv = a.take({N, c.q_dim() + 2 * c.kv_dim()}, dtype, "qkv");
    if (c.qk_norm) {
      q_raw = a.take({N, H, D}, dtype, "q_raw");
      k_raw = a.take({N, Hkv, D}, dtype, "k_raw");
    }
    q = a.take({N, H, D}, dtype, "q");
    k = a.take({N, Hkv, D}, dtype, "k");
    attn = a.take({N, H, D}, dtype, "attn");
    attn_out = a.take({N, C}, dtype, "attn_out");
    gate = a.take({N, F}, dtype, "gate");
    up = a.take({N, F}, dtype, "up");
    act = a.take({N, F}, dtype, "act");
    mlp_out = a.take({N, C}, dtype, "mlp_out");
    last = a.take({B, C}, dtype, "last");
    logits = a.take({B, c.vocab_size}, dtype, "logits");
    if (attention_bytes > 0)
      attention_scratch = a.take({(attention_bytes + 3) / 4}, DType::F32, "attention_scratch");
  }
};

DecoderStep::DecoderStep(const ModelWeights& weights, StepLimits limits)
    : weights_(weights),
      limits_(limits),
      fuse_decode_(fused_decode_enabled()),
      ws_(std::make_shared<Workspace>()) {
  MICROLLM_CHECK(limits.max_tokens > 0 && limits.max_seqs > 0 && limits.max_blocks_per_seq > 0 &&
                     limits.block_size > 0,
                 "DecoderStep", "limits must be positive, found max_tokens ", limits.max_tokens,
                 ", max_seqs ", limits.max_seqs, ", max_blocks_per_seq ", limits.max_blocks_per_seq,
                 ", block_size ", limits.block_size);
  const ModelConfig& c = weights.config();
  MICROLLM_CHECK(
      weights.device().is_cuda() || weights.dtype() == DType::F32 || weights.dtype() == DType::F64,
      "DecoderStep", "the CPU inference path computes in f32 (or f64), found ",
      dtype_name(weights.dtype()), " weights; use --dtype f32 on the CPU");
  const int64_t attention_bytes = ops::paged_attention_workspace_bytes(
      limits.max_tokens, c.num_heads, c.num_kv_heads, c.head_dim,
      limits.max_blocks_per_seq * limits.block_size);
  Arena planner = Arena::measure(weights.device());
  ws_->take_all(planner, c, limits, weights.dtype(), attention_bytes);
  ws_->arena = Arena(planner.used(), weights.device());
  ws_->take_all(ws_->arena, c, limits, weights.dtype(), attention_bytes);
  // paged_attention's split counters start at zero (each call leaves them so).
  if (ws_->attention_scratch.defined()) ws_->attention_scratch.fill(0.0);
}

int64_t DecoderStep::workspace_bytes() const { return ws_->arena.capacity(); }

Tensor DecoderStep::forward(
    const StepBatch& batch, const std::vector<LayerKv>& kv,
    const std::function<void(const std::string&, const Tensor&)>& observe) const {
  const ModelConfig& c = weights_.config();
  const Workspace& ws = *ws_;
  const int64_t N = batch.num_tokens, B = batch.num_seqs, H = c.num_heads, Hkv = c.num_kv_heads,
                D = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim(), F = c.intermediate_size;
  MICROLLM_CHECK(N > 0 && N <= limits_.max_tokens && B > 0 && B <= limits_.max_seqs, "DecoderStep",
                 "step of ", N, " tokens and ", B, " sequences is outside the limits (",
                 limits_.max_tokens, " tokens, ", limits_.max_seqs, " sequences)");
  MICROLLM_CHECK(static_cast<int64_t>(kv.size()) == c.num_layers, "DecoderStep", "expected ",
                 c.num_layers, " layers of KV cache, found ", kv.size());
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Names are built only when someone observes: the step itself makes no strings.
  auto emit = [&](const char* name, const Tensor& value) {
    if (observe) observe(name, value);
  };
  auto emit_layer = [&](int64_t layer, const char* name, const Tensor& value) {
    if (observe) observe("layers." + std::to_string(layer) + "." + name, value);
  };
  auto rows = [](const Tensor& t, int64_t n) { return t.narrow(0, 0, n); };
  auto rows_from = [](const Tensor& t, int64_t first, int64_t n) { return t.narrow(0, first, n); };
  // Steps of at most decode_gemv_max_seqs sequences on CUDA: decode rows [0, Nd) and the LM
  // head through the GEMV, rows [Nd, N) through the GEMM.
  const bool small_step =
      weights_.device().is_cuda() && B <= decode_gemv_max_seqs(weights_.dtype());
  const bool gemv =
      small_step && batch.num_decode_rows >= 1 &&
      ops::gemv_supported(weights_.device(), weights_.dtype(), batch.num_decode_rows,
                          c.hidden_size) &&
      ops::gemv_supported(weights_.device(), weights_.dtype(), batch.num_decode_rows, F);
  const int64_t Nd = gemv ? std::min(batch.num_decode_rows, N) : 0;
  // A step of decode rows only: the norms ride in the GEMVs' prologues and the residual adds
  // in their epilogues (the same bits, gemv_out's GemvFusion). An observer sees every
  // intermediate, so it gets the unfused operators.
  const bool fused =
      fuse_decode_ && Nd == N && !observe &&
      ops::gemv_norm_supported(weights_.device(), weights_.dtype(), N, c.hidden_size);
  // Every GEMV of the step takes the kernel of a B-row call, however many of its rows decode.
  ops::GemvFusion step_gemv;
  step_gemv.kernel_rows = small_step ? B : 0;
  // The fused GEMVs' residual (x) is written two or more kernels before each of them, and the
  // positions and slots by the step's upload.
  step_gemv.early_inputs = true;
  auto project = [&](const Tensor& in, const Tensor& w, const Tensor& bias, const Tensor& out) {
    if (Nd > 0) ops::gemv_out(rows(in, Nd), w, bias, rows(out, Nd), step_gemv);
    if (Nd < N) ops::linear_out(rows_from(in, Nd, N - Nd), w, bias, rows_from(out, Nd, N - Nd));
  };
  const Tensor ids = rows(batch.token_ids, N);        // (N)
  const Tensor positions = rows(batch.positions, N);  // (N)
  const Tensor slots = rows(batch.slot_mapping, N);   // (N)
  const int64_t M = batch.block_tables.size(1);
  const int64_t max_seq_len = batch.max_seq_len > 0 ? batch.max_seq_len : M * limits_.block_size;
  const Tensor x = rows(ws.x, N), h = rows(ws.h, N);  // (N, C)
  const Tensor qkv = rows(ws.qkv, N);                 // (N, H·D + 2·Hkv·D)
  const Tensor q = rows(ws.q, N), k = rows(ws.k, N), attn = rows(ws.attn, N);   // (N, H|Hkv, D)
  const Tensor attn_out = rows(ws.attn_out, N), mlp_out = rows(ws.mlp_out, N);  // (N, C)
  const Tensor gate = rows(ws.gate, N), up = rows(ws.up, N), act = rows(ws.act, N);  // (N, F)
  // Views of the fused projection: q, k, v rows of each token (row stride H·D + 2·Hkv·D).
  const Tensor q_part = qkv.narrow(1, 0, qd).view({N, H, D});            // (N, H, D)
  const Tensor k_part = qkv.narrow(1, qd, kvd).view({N, Hkv, D});        // (N, Hkv, D)
  const Tensor v_part = qkv.narrow(1, qd + kvd, kvd).view({N, Hkv, D});  // (N, Hkv, D)

  auto norm_of = [&](const Tensor& weight) {
    ops::GemvFusion f = step_gemv;
    f.norm_weight = weight;
    f.norm_eps = eps;
    return f;
  };
  ops::GemvFusion add_to_x = step_gemv;  // x += the product
  add_to_x.residual = x;
  ops::embedding_out(weights_.embed(), ids, x);
  emit("embedding", x);
  if (!fused) ops::rms_norm_out(x, weights_.layers()[0].input_norm, eps, h);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerWeights& w = weights_.layers()[static_cast<size_t>(i)];
    emit_layer(i, "input", x);
    emit_layer(i, "attn.norm", h);
    const LayerKv& cache = kv[static_cast<size_t>(i)];
    if (fused && !c.qk_norm) {
      // One GEMV: the norm in its prologue; RoPE on q and k and k, v into the cache in its
      // epilogue (the bits of the separate path below).
      ops::GemvFusion qkv_rope = norm_of(w.input_norm);
      qkv_rope.epilogue = ops::GemvEpilogue::rope_kv_write;
      qkv_rope.rope = {positions, weights_.inv_freq(), slots, q, k, cache.k, cache.v};
      ops::gemv_out(x, w.qkv, w.qkv_bias, Tensor(), qkv_rope);
    } else {
      if (fused)
        ops::gemv_out(x, w.qkv, w.qkv_bias, qkv, norm_of(w.input_norm));
      else
        project(h, w.qkv, w.qkv_bias, qkv);
      // RoPE on q and k at each row's position (each row is its own T = 1), and k, v into
      // the cache at the slots, in one pass; qwen3 normalizes q and k over D first.
      if (c.qk_norm) {
        const Tensor q_raw = rows(ws.q_raw, N), k_raw = rows(ws.k_raw, N);
        ops::cast_out(q_part, q_raw);  // dense copies for the row norm
        ops::cast_out(k_part, k_raw);
        ops::rms_norm_out(q_raw, w.q_norm, eps, q);
        ops::rms_norm_out(k_raw, w.k_norm, eps, k);
        ops::rope_kv_write(q, k, v_part, positions, weights_.inv_freq(), slots, q, k, cache.k,
                           cache.v);
      } else {
        ops::rope_kv_write(q_part, k_part, v_part, positions, weights_.inv_freq(), slots, q, k,
                           cache.k, cache.v);
      }
    }
    emit_layer(i, "attn.q", q);
    emit_layer(i, "attn.k", k);
    emit_layer(i, "attn.v", v_part);
    ops::paged_attention(q, cache.k, cache.v, rows(batch.query_starts, B + 1),
                         rows(batch.seq_lens, B), rows(batch.block_tables, B), scale, max_seq_len,
                         attn, ws.attention_scratch, ops::PagedHistory::earlier_steps);
    if (fused) {
      ops::gemv_out(attn.view({N, qd}), w.o_proj, Tensor(), x, add_to_x);
      ops::GemvFusion gate_up = norm_of(w.post_norm);
      gate_up.epilogue = ops::GemvEpilogue::swiglu;
      ops::gemv_out(x, w.gate_up, Tensor(), act, gate_up);
      ops::gemv_out(act, w.down, Tensor(), x, add_to_x);
      continue;
    }
    project(attn.view({N, qd}), w.o_proj, Tensor(), attn_out);
    emit_layer(i, "attn.out", attn_out);
    ops::add_rms_norm_out(x, attn_out, w.post_norm, eps, x, h);  // x += attn_out; h = norm(x)
    emit_layer(i, "attn.residual", x);
    emit_layer(i, "mlp.norm", h);
    // Decode rows: one GEMV over the fused (2F, C) matrix with the SwiGLU epilogue. Other
    // rows: gate and up from its two row halves, each dense, then swiglu.
    if (Nd > 0) {
      ops::GemvFusion swiglu = step_gemv;
      swiglu.epilogue = ops::GemvEpilogue::swiglu;
      ops::gemv_out(rows(h, Nd), w.gate_up, Tensor(), rows(act, Nd), swiglu);
    }
    if (Nd < N) {
      const int64_t Np = N - Nd;
      const Tensor h_p = rows_from(h, Nd, Np), gate_p = rows_from(gate, Nd, Np),
                   up_p = rows_from(up, Nd, Np);  // (Np, C), (Np, F), (Np, F)
      ops::linear_out(h_p, w.gate_up.narrow(0, 0, F), Tensor(), gate_p);
      ops::linear_out(h_p, w.gate_up.narrow(0, F, F), Tensor(), up_p);
      ops::swiglu_out(gate_p, up_p, rows_from(act, Nd, Np));
    }
    emit_layer(i, "mlp.act", act);
    project(act, w.down, Tensor(), mlp_out);
    emit_layer(i, "mlp.out", mlp_out);
    // The next norm is fused with this residual add: the next layer's input_layernorm, or
    // the final norm after the last layer.
    const Tensor& next_norm = i + 1 < c.num_layers
                                  ? weights_.layers()[static_cast<size_t>(i + 1)].input_norm
                                  : weights_.final_norm();
    ops::add_rms_norm_out(x, mlp_out, next_norm, eps, x, h);
    emit_layer(i, "output", x);
  }
  if (fused) ops::rms_norm_out(x, weights_.final_norm(), eps, h);
  emit("final_norm", h);
  // The LM head reads only each sequence's last new token.
  const Tensor last = rows(ws.last, B);      // (B, C)
  const Tensor logits = rows(ws.logits, B);  // (B, V)
  ops::embedding_out(h, rows(batch.last_rows, B), last);
  // The LM head's rows are the sequences' last rows: the GEMV for small steps on CUDA.
  if (small_step && ops::gemv_supported(weights_.device(), weights_.dtype(), B, c.hidden_size))
    ops::gemv_out(last, weights_.lm_head(), Tensor(), logits);
  else
    ops::linear_out(last, weights_.lm_head(), Tensor(), logits);
  emit("logits", logits);
  return logits;
}

}  // namespace microllm::model
