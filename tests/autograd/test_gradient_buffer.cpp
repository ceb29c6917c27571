// Gradients written straight into claimed gradient buffers (autograd/gradient_buffer.h; on
// unless MICROLLM_GRAD_INTO_BUFFER=0): the claim rules, and that linear's weight gradient
// written through claims (alone, through a join of neighbouring buffers, with a second
// producer, a tied embedding, accumulated passes) has the bits of the same graph without
// claims, in F64, F32 and BF16; and the pending buffer a later producer may add into
// (on unless MICROLLM_ADD_INTO_BUFFER=0): when it is handed out, and the sums through it.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "microllm/autograd/gradient_buffer.h"
#include "microllm/autograd/node.h"
#include "microllm/ops/ops.h"
#include "ops/op_test_util.h"
#include "support/scoped_env.h"

using namespace microllm;
using microllm::testing::ScopedEnv;
using microllm::testing::optest::randn_tensor;
using microllm::testing::optest::same_bits;

namespace {

constexpr const char* kSwitch = "MICROLLM_GRAD_INTO_BUFFER";

bool claimed(const Tensor& leaf) { return leaf.impl()->autograd.grad_buffer_claimed; }

// Leaves of `shapes` (values from `seed`) as the model's parameters are: dense views of one
// flat buffer, side by side in the order given; their gradient buffers dense views of one
// flat gradient buffer, laid out in the order `layout` lists the leaves.
std::vector<Tensor> leaves_with_buffers(const std::vector<Shape>& shapes,
                                        const std::vector<int>& layout, DType dtype,
                                        uint64_t seed) {
  std::vector<int64_t> numel(shapes.size()), offset(shapes.size());
  int64_t total = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    numel[i] = 1;
    for (int64_t s : shapes[i]) numel[i] *= s;
  }
  for (int i : layout) {
    offset[static_cast<size_t>(i)] = total;
    total += numel[static_cast<size_t>(i)];
  }
  const Tensor values = randn_tensor({total}, seed, dtype);  // (total) parameters
  const Tensor flat = Tensor::empty({total}, dtype);         // (total) gradient buffer
  std::vector<Tensor> leaves;
  int64_t start = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor leaf = values.narrow(0, start, numel[i]).view(shapes[i]);
    start += numel[i];
    leaf.set_requires_grad(true);
    leaf.set_grad_buffer(flat.narrow(0, offset[i], numel[i]).view(shapes[i]));
    leaves.push_back(leaf);
  }
  return leaves;
}

// loss = Σ y ⊙ r for a fixed random r of y's shape.
Tensor weighted_sum(const Tensor& y, uint64_t seed) {
  return ops::sum_all(ops::mul(y, randn_tensor(y.shape(), seed, y.dtype())));
}

using Graph = std::function<Tensor(const std::vector<Tensor>& leaves, int pass)>;

struct Run {
  std::vector<Tensor> grads;
  std::vector<bool> claimed;  // per leaf, after the last pass
};

// Runs `passes` backward passes of `graph` (zero_grad before each one when `zero_between`,
// else accumulating) with claims on or off.
Run run(const Graph& graph, const std::vector<Shape>& shapes, const std::vector<int>& layout,
        DType dtype, bool claims, int passes, bool zero_between) {
  const ScopedEnv env(kSwitch, claims ? "1" : "0");
  std::vector<Tensor> leaves = leaves_with_buffers(shapes, layout, dtype, 100);
  for (int pass = 0; pass < passes; ++pass) {
    if (zero_between)
      for (Tensor& leaf : leaves) leaf.zero_grad();
    graph(leaves, pass).backward();
  }
  Run r;
  for (const Tensor& leaf : leaves) {
    EXPECT_TRUE(leaf.grad().same(leaf.grad_buffer()));
    r.grads.push_back(leaf.grad().clone());
    r.claimed.push_back(claimed(leaf));
  }
  return r;
}

// The graph's gradients with claims equal those without, bit for bit; `want_claimed` says
// which leaves a claim must have reached in the last pass.
void expect_same_bits_through_claims(const std::string& what, const Graph& graph,
                                     const std::vector<Shape>& shapes,
                                     const std::vector<int>& layout,
                                     const std::vector<bool>& want_claimed, int passes = 1,
                                     bool zero_between = true) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16}) {
    const Run plain = run(graph, shapes, layout, dtype, false, passes, zero_between);
    const Run through = run(graph, shapes, layout, dtype, true, passes, zero_between);
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_TRUE(same_bits(through.grads[i], plain.grads[i]))
          << what << " " << dtype << " leaf " << i;
      EXPECT_FALSE(plain.claimed[i]) << what << " " << dtype << " leaf " << i;
      EXPECT_EQ(through.claimed[i], want_claimed[i]) << what << " " << dtype << " leaf " << i;
    }
  }
}

}  // namespace

TEST(GradientBuffer, ClaimRules) {
  Tensor leaf = randn_tensor({3, 4}, 1, DType::F32);
  leaf.set_requires_grad(true);
  {
    const ScopedEnv off(kSwitch, "0");
    leaf.set_grad_buffer(Tensor::empty({3, 4}));
    EXPECT_FALSE(autograd::gradient_buffer_claimable(leaf));
    EXPECT_FALSE(autograd::claim_gradient_buffer(leaf).defined());
  }
  const ScopedEnv on(kSwitch, "1");
  // No buffer, no claim.
  leaf.set_grad_buffer(Tensor());
  EXPECT_FALSE(autograd::claim_gradient_buffer(leaf).defined());
  // A dense buffer: claimed once, and again only after zero_grad.
  const Tensor buffer = Tensor::empty({3, 4});
  leaf.set_grad_buffer(buffer);
  const Tensor got = autograd::claim_gradient_buffer(leaf);
  ASSERT_TRUE(got.defined());
  EXPECT_TRUE(got.same(buffer));
  EXPECT_FALSE(autograd::claim_gradient_buffer(leaf).defined());
  leaf.zero_grad();
  EXPECT_TRUE(autograd::claim_gradient_buffer(leaf).defined());
  // A gradient already there: no claim (later gradients add to it).
  leaf.set_grad(Tensor::zeros({3, 4}));
  EXPECT_FALSE(autograd::claim_gradient_buffer(leaf).defined());
  leaf.zero_grad();
  // A buffer that is not dense: no claim.
  leaf.set_grad_buffer(Tensor::empty({4, 3}).transpose(0, 1));
  EXPECT_FALSE(autograd::claim_gradient_buffer(leaf).defined());
  // Not a leaf that requires a gradient: no claim.
  Tensor plain = Tensor::zeros({3, 4});
  EXPECT_FALSE(autograd::claim_gradient_buffer(plain).defined());
  plain.set_grad_buffer(Tensor::empty({3, 4}));
  EXPECT_FALSE(autograd::claim_gradient_buffer(plain).defined());
  leaf.set_grad_buffer(buffer);
  const Tensor scaled = ops::mul(leaf, leaf);  // a non-leaf whose node hands out nothing
  EXPECT_FALSE(autograd::claim_gradient_buffer(scaled).defined());
  EXPECT_TRUE(autograd::gradient_buffer_claimable(leaf));
}

TEST(GradientBuffer, JoinOfNeighbouringBuffersClaimsOneViewOverThem) {
  const ScopedEnv on(kSwitch, "1");
  std::vector<Tensor> parts =
      leaves_with_buffers({{2, 5}, {3, 5}, {4, 5}}, {0, 1, 2}, DType::F32, 7);
  const Tensor joined = ops::join(parts, 0);  // (9, 5)
  const Tensor view = autograd::claim_gradient_buffer(joined);
  ASSERT_TRUE(view.defined());
  EXPECT_EQ(view.shape(), (Shape{9, 5}));
  EXPECT_EQ(view.storage(), parts[0].grad_buffer().storage());
  EXPECT_EQ(view.offset(), parts[0].grad_buffer().offset());
  EXPECT_TRUE(view.is_contiguous());
  for (const Tensor& p : parts) EXPECT_TRUE(claimed(p));
  EXPECT_FALSE(autograd::claim_gradient_buffer(joined).defined());  // once a pass

  // Buffers in another order than the parts: no claim, and no part is claimed.
  parts = leaves_with_buffers({{2, 5}, {3, 5}}, {1, 0}, DType::F32, 7);
  EXPECT_FALSE(autograd::claim_gradient_buffer(ops::join(parts, 0)).defined());
  for (const Tensor& p : parts) EXPECT_FALSE(claimed(p));
  // One part claimed already: none is claimed through the join.
  parts = leaves_with_buffers({{2, 5}, {3, 5}}, {0, 1}, DType::F32, 7);
  ASSERT_TRUE(autograd::claim_gradient_buffer(parts[1]).defined());
  EXPECT_FALSE(autograd::claim_gradient_buffer(ops::join(parts, 0)).defined());
  EXPECT_FALSE(claimed(parts[0]));
}

TEST(GradientBuffer, LinearThroughClaimsGivesTheSameBits) {
  const Graph plain = [](const std::vector<Tensor>& p, int pass) {
    const Tensor x = randn_tensor({9, 6}, 50 + pass, p[0].dtype());  // (N, in)
    return weighted_sum(ops::linear(x, p[0], p[1]), 60 + pass);
  };
  expect_same_bits_through_claims("weight and bias", plain, {{4, 6}, {4}}, {0, 1}, {true, false});
  // Two passes accumulated: the second pass adds in place (no claim while a gradient is
  // there), after zero_grad the claim comes back.
  expect_same_bits_through_claims("accumulated", plain, {{4, 6}, {4}}, {0, 1}, {true, false}, 2,
                                  false);
  expect_same_bits_through_claims("zeroed", plain, {{4, 6}, {4}}, {0, 1}, {true, false}, 2, true);

  // Q/K/V joined: one claim over the three neighbouring buffers; not when they are apart.
  const Graph joined = [](const std::vector<Tensor>& p, int) {
    const Tensor x = randn_tensor({2, 3, 6}, 51, p[0].dtype());  // (B, T, in)
    return weighted_sum(ops::linear(x, ops::join({p[0], p[1], p[2]}, 0)), 61);
  };
  expect_same_bits_through_claims("joined", joined, {{4, 6}, {2, 6}, {2, 6}}, {0, 1, 2},
                                  {true, true, true});
  expect_same_bits_through_claims("joined, buffers apart", joined, {{4, 6}, {2, 6}, {2, 6}},
                                  {2, 1, 0}, {false, false, false});

  // One weight in two products: the first backward claims, the second allocates, and the
  // engine's sum lands in the buffer.
  const Graph twice = [](const std::vector<Tensor>& p, int) {
    const Tensor x1 = randn_tensor({5, 6}, 52, p[0].dtype());  // (N1, in)
    const Tensor x2 = randn_tensor({7, 6}, 53, p[0].dtype());  // (N2, in)
    return ops::add(weighted_sum(ops::linear(x1, p[0]), 62),
                    weighted_sum(ops::linear(x2, p[0]), 63));
  };
  expect_same_bits_through_claims("used twice", twice, {{4, 6}}, {0}, {true});

  // A tied embedding: the head's product claims, the embedding's gradient is added to it.
  const Graph tied = [](const std::vector<Tensor>& p, int) {
    const Tensor ids = Tensor::from_vector(std::vector<int64_t>{3, 0, 7, 3, 9}, {5}, DType::I64);
    const Tensor h = ops::mul(ops::embedding(p[0], ids), p[1]);  // (5, C)
    return weighted_sum(ops::linear(h, p[0]), 64);               // logits (5, V)
  };
  expect_same_bits_through_claims("tied", tied, {{10, 6}, {6}}, {0, 1}, {true, false});
}

namespace {

constexpr const char* kAddSwitch = "MICROLLM_ADD_INTO_BUFFER";

// The tied pattern with an observer in the embedding's place: h = w[ids] through a node
// whose backward records what pending_gradient_buffer(w) hands out, then logits = h · wᵀ.
// Backward runs the head's product first (it claims w's buffer), then the observer.
struct Observed {
  bool defined = false;
  bool is_buffer = false;
};
Observed observe_pending(Tensor w, bool zero_first) {
  if (zero_first) w.zero_grad();
  Observed seen;
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 4, 1}, {3}, DType::I64);
  const Tensor looked_up = ops::embedding(w.detach(), ids);  // (3, C), no graph of its own
  Tensor h = looked_up.clone();                              // (3, C)
  autograd::record("observer", {w}, {&h}, [w, &seen](const std::vector<Tensor>&) {
    const Tensor pending = autograd::pending_gradient_buffer(w);
    seen.defined = pending.defined();
    seen.is_buffer = pending.defined() && pending.same(w.grad_buffer());
    return std::vector<Tensor>{Tensor()};
  });
  weighted_sum(ops::linear(h, w), 70).backward();
  return seen;
}

}  // namespace

TEST(GradientBuffer, PendingBufferIsHandedOutOnlyWhileTheClaimedSumWaits) {
  const ScopedEnv claims(kSwitch, "1");
  Tensor w = randn_tensor({6, 4}, 2, DType::F32);  // (V, C)
  w.set_requires_grad(true);
  w.set_grad_buffer(Tensor::empty({6, 4}));
  {
    const ScopedEnv adds(kAddSwitch, "1");
    const Observed first = observe_pending(w, true);
    EXPECT_TRUE(first.defined);
    EXPECT_TRUE(first.is_buffer);
    // After the pass the gradient is accumulated: nothing is pending any more.
    EXPECT_FALSE(autograd::pending_gradient_buffer(w).defined());
    // A second pass without zero_grad: the head cannot claim (a gradient is there), so the
    // sum so far is a new tensor and nothing is handed out.
    EXPECT_FALSE(observe_pending(w, false).defined);
    // Claims off: the head allocates; nothing is handed out.
    const ScopedEnv no_claims(kSwitch, "0");
    EXPECT_FALSE(observe_pending(w, true).defined);
  }
  {  // Adds off (the default): nothing is handed out, claimed or not.
    const ScopedEnv no_adds(kAddSwitch, "0");
    EXPECT_FALSE(observe_pending(w, true).defined);
  }
  // A non-leaf, or a leaf without a buffer, never has a pending buffer.
  const ScopedEnv adds(kAddSwitch, "1");
  EXPECT_FALSE(autograd::pending_gradient_buffer(ops::mul(w, w)).defined());
  Tensor bare = randn_tensor({6, 4}, 3, DType::F32);
  bare.set_requires_grad(true);
  EXPECT_FALSE(observe_pending(bare, true).defined);
}

TEST(GradientBuffer, AddsIntoThePendingBufferGiveTheSameBits) {
  // Ids repeat and leave vocabulary rows unnamed; two passes, zeroed and accumulated.
  const Graph tied = [](const std::vector<Tensor>& p, int pass) {
    const Tensor ids =
        Tensor::from_vector(std::vector<int64_t>{3, 0, 7, 3, 9, 3, 0}, {7}, DType::I64);
    const Tensor h = ops::mul(ops::embedding(p[0], ids), p[1]);  // (7, C)
    return weighted_sum(ops::linear(h, p[0]), 80 + pass);        // logits (7, V)
  };
  // One weight in three products: the first claims, the engine adds the others into the
  // pending buffer in place.
  const Graph thrice = [](const std::vector<Tensor>& p, int pass) {
    Tensor loss;
    for (int i = 0; i < 3; ++i) {
      const Tensor x = randn_tensor({5 + i, 6}, 90 + 10 * pass + i, p[0].dtype());  // (N, in)
      const Tensor part = weighted_sum(ops::linear(x, p[0]), 95 + i);
      loss = loss.defined() ? ops::add(loss, part) : part;
    }
    return loss;
  };
  for (const char* adds : {"0", "1"}) {
    const ScopedEnv env(kAddSwitch, adds);
    expect_same_bits_through_claims(std::string("thrice, adds ") + adds, thrice, {{4, 6}}, {0},
                                    {true});
    expect_same_bits_through_claims(std::string("tied, adds ") + adds, tied, {{10, 6}, {6}}, {0, 1},
                                    {true, false});
    expect_same_bits_through_claims(std::string("tied accumulated, adds ") + adds, tied,
                                    {{10, 6}, {6}}, {0, 1}, {true, false}, 2, false);
  }
}
