// ModelWeights (see weights.h): one flat buffer carved into the fused per-layer matrices,
// with the Hugging Face parameters as row views of them.
#include "microllm/model/weights.h"

#include <filesystem>

#include "microllm/core/random.h"
#include "microllm/io/safetensors.h"

namespace microllm::model {
namespace {

constexpr int64_t kAlignBytes = 256;  // every tensor starts 16-byte-load (and TMA) aligned

// Hands out element offsets in the flat buffer, each aligned to kAlignBytes.
class FlatPlanner {
 public:
  explicit FlatPlanner(DType dtype)
      : align_(kAlignBytes / static_cast<int64_t>(dtype_size(dtype))) {}
  int64_t take(int64_t numel) {
    const int64_t start = (next_ + align_ - 1) / align_ * align_;
    next_ = start + numel;
    return start;
  }
  int64_t total() const { return (next_ + align_ - 1) / align_ * align_; }

 private:
  int64_t align_;
  int64_t next_ = 0;
};

struct Slot {
  Shape shape;
  int64_t offset = 0;  // elements into the flat buffer
};

// Offsets of every fused tensor, in the layout order of weights.h.
struct FlatLayout {
  Slot embed, final_norm, lm_head;
  struct Layer {
    Slot input_norm, qkv, qkv_bias, q_norm, k_norm, o_proj, post_norm, gate_up, down;
  };
  std::vector<Layer> layers;
  int64_t total = 0;
};

FlatLayout plan_layout(const ModelConfig& c, DType dtype) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const int64_t qkv_rows = c.q_dim() + 2 * c.kv_dim();
  FlatPlanner planner(dtype);
  auto slot = [&](Shape shape) { return Slot{shape, planner.take(shape_numel(shape))}; };
  FlatLayout layout;
  layout.embed = slot({V, C});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    FlatLayout::Layer l;
    l.input_norm = slot({C});
    l.qkv = slot({qkv_rows, C});
    if (c.qkv_bias) l.qkv_bias = slot({qkv_rows});
    if (c.qk_norm) {
      l.q_norm = slot({D});
      l.k_norm = slot({D});
    }
    l.o_proj = slot({C, c.q_dim()});
    l.post_norm = slot({C});
    l.gate_up = slot({2 * F, C});
    l.down = slot({C, F});
    layout.layers.push_back(l);
  }
  layout.final_norm = slot({C});
  if (!c.tie_word_embeddings) layout.lm_head = slot({V, C});
  layout.total = planner.total();
  return layout;
}

}  // namespace

ModelWeights::ModelWeights(ModelConfig config, Device device, DType dtype)
    : config_(std::move(config)), device_(device), dtype_(dtype) {
  config_.validate("ModelWeights");
  MICROLLM_CHECK(is_floating(dtype), "ModelWeights", "weights must be floating, found ", dtype);
  const ModelConfig& c = config_;
  const FlatLayout layout = plan_layout(c, dtype);
  flat_ = Tensor::empty({layout.total}, dtype, device);  // (P)
  // A dense view of `shape` at `offset` elements (+ `row` rows of `row_numel` elements).
  auto view = [&](const Shape& shape, int64_t offset) {
    return Tensor::from_storage(flat_.storage(), shape, contiguous_strides(shape),
                                flat_.offset() + offset, dtype);
  };
  auto at = [&](const Slot& s) { return view(s.shape, s.offset); };
  auto name = [&](const std::string& n, const Tensor& t) { named_.emplace(n, t); };

  const int64_t C = c.hidden_size, F = c.intermediate_size, qd = c.q_dim(), kvd = c.kv_dim();
  embed_ = at(layout.embed);
  name("model.embed_tokens.weight", embed_);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const FlatLayout::Layer& s = layout.layers[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = at(s.input_norm);
    l.qkv = at(s.qkv);
    // The Hugging Face projections are row ranges of the fused matrices.
    name(p + "self_attn.q_proj.weight", view({qd, C}, s.qkv.offset));
    name(p + "self_attn.k_proj.weight", view({kvd, C}, s.qkv.offset + qd * C));
    name(p + "self_attn.v_proj.weight", view({kvd, C}, s.qkv.offset + (qd + kvd) * C));
    if (c.qkv_bias) {
      l.qkv_bias = at(s.qkv_bias);
      name(p + "self_attn.q_proj.bias", view({qd}, s.qkv_bias.offset));
      name(p + "self_attn.k_proj.bias", view({kvd}, s.qkv_bias.offset + qd));
      name(p + "self_attn.v_proj.bias", view({kvd}, s.qkv_bias.offset + qd + kvd));
    }
    if (c.qk_norm) {
      l.q_norm = at(s.q_norm);
      l.k_norm = at(s.k_norm);
      name(p + "self_attn.q_norm.weight", l.q_norm);
      name(p + "self_attn.k_norm.weight", l.k_norm);
    }
    l.o_proj = at(s.o_proj);
    l.post_norm = at(s.post_norm);
    l.gate_up = at(s.gate_up);
    l.down = at(s.down);
    name(p + "input_layernorm.weight", l.input_norm);
    name(p + "self_attn.o_proj.weight", l.o_proj);
    name(p + "post_attention_layernorm.weight", l.post_norm);
    name(p + "mlp.gate_proj.weight", view({F, C}, s.gate_up.offset));
    name(p + "mlp.up_proj.weight", view({F, C}, s.gate_up.offset + F * C));
    name(p + "mlp.down_proj.weight", l.down);
    layers_.push_back(std::move(l));
  }
  final_norm_ = at(layout.final_norm);
  name("model.norm.weight", final_norm_);
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    lm_head_ = at(layout.lm_head);
    name("lm_head.weight", lm_head_);
  }
  inv_freq_ = rope_frequencies(c).to(device);  // (D/2) F32
}

ModelWeights ModelWeights::random(ModelConfig config, Device device, DType dtype, uint64_t seed,
                                  double initializer_range) {
  ModelWeights w(std::move(config), device, dtype);
  // Transformer's initialization, parameter by parameter in the same order, so both give the
  // same values for the same seed.
  Generator gen(seed);
  for (const ParameterSpec& spec : parameter_specs(w.config_)) {
    Tensor& t = w.named_.at(spec.name);
    const bool is_vector = spec.shape.size() == 1;
    if (is_vector && spec.name.ends_with(".bias"))
      t.fill(0.0);
    else if (is_vector)
      t.fill(1.0);
    else
      t.copy_from(randn(spec.shape, gen, dtype, device, 0.0, initializer_range));
  }
  return w;
}

ModelWeights ModelWeights::load(const std::string& dir, Device device, DType dtype) {
  MICROLLM_CHECK(std::filesystem::is_directory(dir), "ModelWeights::load",
                 "expected a model folder (config.json + safetensors), found no folder '", dir,
                 "'");
  ModelWeights w(ModelConfig::load(dir), device, dtype);
  io::load_into(w.named_, io::open_checkpoint(dir), /*strict=*/true);
  return w;
}

}  // namespace microllm::model
