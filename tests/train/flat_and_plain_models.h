// A model on the flat buffer of ModelWeights::random and the same model with separately
// allocated parameters, both with gradients on: the pair the flat-optimizer tests compare
// (CPU and CUDA).
#pragma once

#include <cstdint>

#include "microllm/core/tensor.h"
#include "microllm/model/transformer.h"
#include "microllm/model/weights.h"

namespace microllm::testing {

struct FlatAndPlainModels {
  model::ModelWeights weights;  // the flat buffer `flat`'s parameters are views of
  model::Transformer flat;
  model::Transformer plain;
};

inline FlatAndPlainModels flat_and_plain_models(const model::ModelConfig& config, Device device,
                                                DType dtype, uint64_t seed) {
  model::ModelWeights weights = model::ModelWeights::random(config, device, dtype, seed);
  model::Transformer flat = model::Transformer::from_weights(weights);
  model::Transformer plain(config, device, dtype, seed);
  for (const auto& [name, p] : flat.parameters()) Tensor(p).set_requires_grad(true);
  plain.set_requires_grad(true);
  return {std::move(weights), std::move(flat), std::move(plain)};
}

}  // namespace microllm::testing
