// The next-token loss of a fixed batch through a fresh tiny model, and every parameter's
// gradient by name: what the model tests compare between two forms of the same model.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "microllm/model/transformer.h"

namespace microllm::testing {

using LossAndGradients = std::pair<Tensor, std::map<std::string, Tensor>>;

// ids (2, 6) of a 37-token vocabulary (tiny_config's); the model's weights from seed 17.
inline LossAndGradients loss_and_gradients(const model::ModelConfig& config, Device device,
                                           DType dtype) {
  const Tensor ids =
      Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 36, 0, 7, 7, 3, 11, 30, 4}, {2, 6})
          .to(device);
  model::Transformer t(config, device, dtype, 17);
  t.set_requires_grad(true);
  const Tensor loss = model::Transformer::next_token_loss(t.forward(ids), ids);
  loss.backward();
  std::map<std::string, Tensor> grads;
  for (const auto& [name, p] : t.parameters()) grads[name] = p.grad();
  return {loss, grads};
}

}  // namespace microllm::testing
